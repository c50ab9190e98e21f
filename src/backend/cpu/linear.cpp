// linear and matmul through the GEMM entry points of gemm.h. Operands are used in place when their
// layout is a (possibly transposed) row-major matrix of f32 (or bf16 when both operands are bf16);
// anything else is first gathered into contiguous f32. Accumulation is f32; the result is rounded
// once to the output dtype.
#include <cstring>
#include <optional>

#include "backend/cpu/common.h"
#include "backend/cpu/gemm.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/linear.h"
#include "backend/cpu/strided.h"
#include "backend/cpu/threads.h"

namespace diffq::backend::cpu {

namespace {

// A matrix X[R, C] at element strides (sr, sc) as a GEMM operand: row-major with leading dim `ld`
// (colmajor = false), or stored transposed (colmajor = true, X^T row-major with leading dim `ld`).
struct Layout {
  bool ok = false;
  bool colmajor = false;
  int64_t ld = 0;
};

Layout gemm_layout(int64_t R, int64_t C, int64_t sr, int64_t sc) {
  if ((sc == 1 || C == 1) && (R == 1 || sr >= C)) return {true, false, R == 1 ? C : sr};
  if ((sr == 1 || R == 1) && (C == 1 || sc >= R)) return {true, true, C == 1 ? R : sc};
  return {};
}

// `t` itself when usable by GEMM as a stack of matrices over its last two dims (f32, or bf16 when
// keep_bf16), else a contiguous f32 copy.
Tensor gemm_ready(const Tensor& t, bool keep_bf16) {
  const int64_t R = t.size(-2), C = t.size(-1);
  const bool dtype_ok = t.dtype() == DType::f32 || (keep_bf16 && t.dtype() == DType::bf16);
  if (dtype_ok && gemm_layout(R, C, t.strides()[t.dim() - 2], t.strides()[t.dim() - 1]).ok) return t;
  Tensor c = Tensor::empty(t.shape(), DType::f32);
  gather_f32(t, c.data<float>());
  return c;
}

void run_gemm(bool bf16, const Tensor& a, int64_t a_off, Layout la, const Tensor& b, int64_t b_off,
              Layout lb, bool trans_b_logical, int64_t m, int64_t n, int64_t k, float beta, float* c,
              int64_t ldc) {
  // op(A) = A (a is the logical [m, k] matrix); op(B) = b (logical [k, n]) or b^T when
  // trans_b_logical (b is the logical [n, k] matrix, as linear's weight).
  const bool ta = la.colmajor, tb = trans_b_logical != lb.colmajor;
  if (bf16) {
    gemm_bf16(ta, tb, m, n, k, 1.f, a.data<uint16_t>() + a_off, la.ld, b.data<uint16_t>() + b_off,
              lb.ld, beta, c, ldc);
  } else {
    sgemm(ta, tb, m, n, k, 1.f, a.data<float>() + a_off, la.ld, b.data<float>() + b_off, lb.ld, beta,
          c, ldc);
  }
}

// True when dims [0, rank-1) of t merge into one with a single stride (so t is an [M, K] matrix).
bool rows_mergeable(const Tensor& t) {
  int64_t expect = -1;
  for (int64_t d = t.dim() - 2; d >= 0; --d) {
    if (t.size(d) == 1) continue;
    if (expect >= 0 && t.strides()[d] != expect) return false;
    expect = t.strides()[d] * t.size(d);
  }
  return true;
}

int64_t merged_row_stride(const Tensor& t) {
  for (int64_t d = t.dim() - 2; d >= 0; --d)
    if (t.size(d) != 1) return t.strides()[d];
  return t.size(-1);
}

// C rows = bias (or zeros when there is no bias and no GEMM will write them).
void fill_rows(float* c, int64_t m, int64_t n, const Tensor& bias, bool gemm_follows) {
  if (!bias.defined()) {
    if (gemm_follows) return;  // beta = 0 overwrites
    std::memset(c, 0, size_t(m * n) * sizeof(float));
    return;
  }
  const F32Input b(bias);
  parallel_for(m, std::max<int64_t>(1, 16384 / std::max<int64_t>(n, 1)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) std::memcpy(c + r * n, b.data(), size_t(n) * sizeof(float));
  });
}

// linear's operands as GEMM operands: x as the [M, K] matrix (rows merged), w as [N, K].
struct LinearOperands {
  bool bf16 = false;
  Tensor x, w;
  Layout lx, lw;
};

LinearOperands linear_operands(const Tensor& x_in, const Tensor& w, int64_t M) {
  const int64_t K = w.size(1), N = w.size(0);
  const bool bf16 = x_in.dtype() == DType::bf16 && w.dtype() == DType::bf16;
  Tensor x = x_in;
  if (x.dim() == 1) x = x.unsqueeze(0);
  if (!rows_mergeable(x)) {
    Tensor xc = Tensor::empty(x.shape(), DType::f32);
    gather_f32(x, xc.data<float>());
    x = xc;
  }
  Tensor x2(x.storage(), {M, K}, {merged_row_stride(x), x.strides().back()}, x.offset(), x.dtype());
  const Tensor xa = gemm_ready(x2, bf16), wa = gemm_ready(w, bf16);
  LinearOperands o;
  o.bf16 = bf16 && xa.dtype() == DType::bf16 && wa.dtype() == DType::bf16;
  o.x = o.bf16 || xa.dtype() == DType::f32 ? xa : gemm_ready(xa, false);
  o.w = o.bf16 || wa.dtype() == DType::f32 ? wa : gemm_ready(wa, false);
  o.lx = gemm_layout(M, K, o.x.strides()[0], o.x.strides()[1]);
  o.lw = gemm_layout(N, K, o.w.strides()[0], o.w.strides()[1]);
  return o;
}

void linear_kernel(const OpCall& c, Tensor& out) {
  const Tensor& w = c.inputs[1];
  const Tensor bias = c.inputs.size() > 2 ? c.inputs[2] : Tensor();
  const int64_t K = w.size(1), N = w.size(0), M = out.numel() / N;
  std::optional<LinearOperands> o;
  if (K > 0 && M > 0) o = linear_operands(c.inputs[0], w, M);
  if (o && o->bf16 && !o->lx.colmajor && !o->lw.colmajor && out.dtype() == DType::bf16 && out.is_contiguous()) {
    // bf16 x, w and y on oneDNN: its primitive adds the bias and rounds to bf16 (no f32 C to fill,
    // accumulate into and round in passes of its own).
    std::optional<F32Input> b;
    if (bias.defined()) b.emplace(bias);
    if (gemm_bf16_linear_to_bf16(M, N, K, o->x.data<uint16_t>(), o->lx.ld, o->w.data<uint16_t>(), o->lw.ld,
                                 b ? b->data() : nullptr, out.data<uint16_t>(), N))
      return;
  }
  F32Output y(out);
  fill_rows(y.data(), M, N, bias, o.has_value());
  if (o) run_gemm(o->bf16, o->x, 0, o->lx, o->w, 0, o->lw, true, M, N, K, bias.defined() ? 1.f : 0.f, y.data(), N);
  y.commit();
}

void matmul_kernel(const OpCall& c, Tensor& out) {
  const int64_t M = out.size(-2), N = out.size(-1), K = c.inputs[0].size(-1);
  F32Output y(out);
  const int64_t nb = out.numel() / std::max<int64_t>(M * N, 1);
  if (K == 0) {
    std::memset(y.data(), 0, size_t(out.numel()) * sizeof(float));
    y.commit();
    return;
  }
  const bool bf16 = c.inputs[0].dtype() == DType::bf16 && c.inputs[1].dtype() == DType::bf16;
  Tensor a = gemm_ready(c.inputs[0], bf16), b = gemm_ready(c.inputs[1], bf16);
  if (a.dtype() != b.dtype()) {
    a = gemm_ready(a, false);
    b = gemm_ready(b, false);
  }
  const bool use_bf16 = a.dtype() == DType::bf16;
  const Layout la = gemm_layout(M, K, a.strides()[a.dim() - 2], a.strides()[a.dim() - 1]);
  const Layout lb = gemm_layout(K, N, b.strides()[b.dim() - 2], b.strides()[b.dim() - 1]);
  // Batch offsets: broadcast strides of each operand's batch dims over the output's batch shape.
  Shape batch(out.shape().begin(), out.shape().end() - 2);
  auto batch_strides = [&](const Tensor& t) {
    Tensor bt(t.storage(), Shape(t.shape().begin(), t.shape().end() - 2),
              Shape(t.strides().begin(), t.strides().end() - 2), t.offset(), t.dtype());
    Shape s = broadcast_strides(bt, batch);
    s.push_back(1);
    return s;
  };
  Shape bshape = batch;
  bshape.push_back(1);
  const RowIterator ia(bshape, batch_strides(a)), ib(bshape, batch_strides(b));
  for (int64_t i = 0; i < nb; ++i)
    run_gemm(use_bf16, a, ia.row_offset(i), la, b, ib.row_offset(i), lb, false, M, N, K, 0.f,
             y.data() + i * M * N, N);
  y.commit();
}

}  // namespace

void linear_parts(const Tensor& x, const Tensor& w, const Tensor& bias, const GemmParts& parts) {
  const int64_t K = w.size(1), N = w.size(0), M = x.numel() / std::max<int64_t>(K, 1);
  if (M == 0 || N == 0) return;
  std::optional<F32Input> b;
  if (bias.defined()) b.emplace(bias);
  GemmParts with_bias;
  with_bias.begin = [&](int64_t r0, int64_t r1, int64_t c0, int64_t c1, int64_t* ld) {
    float* p = parts.begin(r0, r1, c0, c1, ld);
    for (int64_t r = r0; r < r1; ++r) {
      float* row = p + (r - r0) * *ld;
      if (b) std::memcpy(row, b->data() + c0, size_t(c1 - c0) * sizeof(float));
      else if (K == 0) std::memset(row, 0, size_t(c1 - c0) * sizeof(float));
    }
    return p;
  };
  with_bias.end = parts.end;
  if (K == 0) {  // y = bias (or zeros), as the kernel
    int64_t ld = 0;
    float* p = with_bias.begin(0, M, 0, N, &ld);
    parts.end(0, M, 0, N, p, ld);
    return;
  }
  const LinearOperands o = linear_operands(x, w, M);
  // As run_gemm for linear: op(A) = x, op(B) = w^T.
  const bool ta = o.lx.colmajor, tb = !o.lw.colmajor;
  const float beta = b ? 1.f : 0.f;
  if (o.bf16)
    gemm_bf16_parts(ta, tb, M, N, K, 1.f, o.x.data<uint16_t>(), o.lx.ld, o.w.data<uint16_t>(), o.lw.ld, beta,
                    with_bias);
  else
    sgemm_parts(ta, tb, M, N, K, 1.f, o.x.data<float>(), o.lx.ld, o.w.data<float>(), o.lw.ld, beta, with_bias);
}

namespace {
// x [..., K] as bf16 GEMM rows [M, K] (row stride *ldx), or undefined where they are not.
Tensor bf16_gemm_rows(const Tensor& x_in, int64_t K, int64_t* M, int64_t* ldx) {
  if (x_in.dtype() != DType::bf16 || x_in.dim() < 1 || x_in.size(-1) != K || K <= 0) return {};
  const Tensor x = x_in.dim() == 1 ? x_in.unsqueeze(0) : x_in;
  *M = x.numel() / K;
  if (*M <= 0 || !rows_mergeable(x)) return {};
  Tensor x2(x.storage(), {*M, K}, {merged_row_stride(x), x.strides().back()}, x.offset(), x.dtype());
  const Layout lx = gemm_layout(*M, K, x2.strides()[0], x2.strides()[1]);
  if (!lx.ok || lx.colmajor) return {};
  *ldx = lx.ld;
  return x2;
}
}  // namespace

bool linear_bf16_packed(const Tensor& x_in, const uint16_t* w_packed, int64_t N, int64_t K, const Tensor& bias,
                        Tensor& out, std::optional<ops::UnaryFn> act) {
  int64_t M = 0, ldx = 0;
  const Tensor x = N > 0 ? bf16_gemm_rows(x_in, K, &M, &ldx) : Tensor();
  if (!x.defined()) return false;
  Shape shape = x_in.shape();
  shape.back() = N;
  // A given out (ops::linear_q_into: a view with rows of N, e.g. columns of a concat's buffer) is written in
  // place when its rows have one stride; else a fresh result.
  const bool into = out.defined() && out.dtype() == DType::bf16 && out.shape() == shape && out.strides().back() == 1 &&
                    rows_mergeable(out) && !out.is_symbolic() && out.device().is_cpu();
  Tensor y = into ? out : Tensor::empty(shape, DType::bf16);
  const int64_t ldy = into ? merged_row_stride(out) : N;
  std::optional<F32Input> b;
  if (bias.defined()) b.emplace(bias);
  if (!gemm_bf16_linear_packed(M, N, K, x.data<uint16_t>(), ldx, w_packed, b ? b->data() : nullptr,
                               y.data<uint16_t>(), ldy, act))
    return false;
  out = std::move(y);
  return true;
}

bool linear_bf16_packed_parts(const Tensor& x_in, const uint16_t* w_packed, int64_t N, int64_t K, const Tensor& bias,
                              const GemmParts& parts) {
  int64_t M = 0, ldx = 0;
  const Tensor x = N > 0 ? bf16_gemm_rows(x_in, K, &M, &ldx) : Tensor();
  if (!x.defined()) return false;
  std::optional<F32Input> b;
  if (bias.defined()) b.emplace(bias);
  gemm_bf16_linear_packed_parts(M, N, K, x.data<uint16_t>(), ldx, w_packed, b ? b->data() : nullptr, parts,
                                /*round_bf16=*/true);
  return true;
}

void register_linear_kernels() {
  ops::register_kernel(OpKind::linear, DeviceKind::cpu, linear_kernel);
  ops::register_kernel(OpKind::matmul, DeviceKind::cpu, matmul_kernel);
}

}  // namespace diffq::backend::cpu
