// The scalar reference of the fused elementwise kernel: evaluates the program per output element with
// the C library's math, rounding each register to its dtype as the eager ops do.
#include <cmath>

#include "compile/fused_reference.h"
#include "diffq/error.h"

namespace diffq::compile {

namespace {
float unary_ref(int64_t fn, float x) {
  switch (ops::UnaryFn(fn)) {
    case ops::UnaryFn::silu: return x / (1.f + std::exp(-x));
    case ops::UnaryFn::gelu_tanh:
      return 0.5f * x * (1.f + std::tanh(0.7978845608028654f * (x + 0.044715f * x * x * x)));
    case ops::UnaryFn::gelu_erf: return 0.5f * x * (1.f + std::erf(x * 0.70710678118654752f));
    case ops::UnaryFn::quick_gelu: return x / (1.f + std::exp(-1.702f * x));
    case ops::UnaryFn::exp: return std::exp(x);
    case ops::UnaryFn::neg: return -x;
    case ops::UnaryFn::sqrt: return std::sqrt(x);
    case ops::UnaryFn::rsqrt: return 1.f / std::sqrt(x);
    case ops::UnaryFn::tanh: return std::tanh(x);
    case ops::UnaryFn::sigmoid: return 1.f / (1.f + std::exp(-x));
    case ops::UnaryFn::sin: return std::sin(x);
    case ops::UnaryFn::cos: return std::cos(x);
    case ops::UnaryFn::abs: return std::fabs(x);
    case ops::UnaryFn::square: return x * x;
  }
  return x;
}

float binary_ref(int64_t fn, float a, float b) {
  switch (ops::BinaryFn(fn)) {
    case ops::BinaryFn::add: return a + b;
    case ops::BinaryFn::sub: return a - b;
    case ops::BinaryFn::mul: return a * b;
    case ops::BinaryFn::div: return a / b;
    case ops::BinaryFn::maximum: return std::isnan(a) ? a : std::isnan(b) ? b : std::max(a, b);
    case ops::BinaryFn::minimum: return std::isnan(a) ? a : std::isnan(b) ? b : std::min(a, b);
  }
  return a;
}

float scalar_ref(int64_t fn, float x, float s) {
  switch (ops::ScalarFn(fn)) {
    case ops::ScalarFn::add: return x + s;
    case ops::ScalarFn::mul: return x * s;
    case ops::ScalarFn::rsub: return s - x;
    case ops::ScalarFn::pow: return s == 2.f ? x * x : std::pow(x, s);
  }
  return x;
}
}  // namespace

// The norm prologue's output as a tensor of out's shape (double statistics, rounded to its dtype).
Tensor reference_norm(const NormPrologue& np, const std::vector<Tensor>& leaves, const Shape& shape) {
  const Tensor x = leaves[size_t(np.x)].expand(shape).contiguous();
  const int64_t D = shape.back(), rows = shape_numel(shape) / D;
  const auto xv = x.to_f64_vector();
  std::vector<double> w(size_t(D), 1.0), b(size_t(D), 0.0);
  if (np.w >= 0) w = leaves[size_t(np.w)].expand({D}).contiguous().to_f64_vector();
  if (np.b >= 0) b = leaves[size_t(np.b)].expand({D}).contiguous().to_f64_vector();
  std::vector<float> y(xv.size());
  for (int64_t r = 0; r < rows; ++r) {
    const double* row = xv.data() + r * D;
    double mean = 0, var = 0;
    if (!np.rms) {
      for (int64_t i = 0; i < D; ++i) mean += row[i];
      mean /= double(D);
    }
    for (int64_t i = 0; i < D; ++i) var += (row[i] - mean) * (row[i] - mean);
    const double rstd = 1.0 / std::sqrt(var / double(D) + np.eps);
    for (int64_t i = 0; i < D; ++i)
      y[size_t(r * D + i)] = round_through(np.dtype, float((row[i] - mean) * rstd * w[size_t(i)] + b[size_t(i)]));
  }
  return Tensor::from_vector(y, shape);
}

// The GEMM prologue's output (x @ w^T + b, f64 accumulation) as a tensor of out's shape, rounded to f32
// and then to its dtype.
Tensor reference_linear(const GemmPrologue& gp, const std::vector<Tensor>& leaves, const Shape& shape) {
  check(gp.module.empty(), "compile", "the scalar reference has no quantized GEMM (", gp.module, ")");
  const Tensor& w = leaves[size_t(gp.w)];
  const int64_t N = w.size(0), K = w.size(1), M = shape_numel(shape) / N;
  const auto xv = leaves[size_t(gp.x)].contiguous().to_f64_vector();
  const auto wv = w.contiguous().to_f64_vector();
  std::vector<double> b(size_t(N), 0.0);
  if (gp.b >= 0) b = leaves[size_t(gp.b)].expand({N}).contiguous().to_f64_vector();
  std::vector<float> y(size_t(M * N));
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double acc = b[size_t(n)];
      for (int64_t k = 0; k < K; ++k) acc += xv[size_t(m * K + k)] * wv[size_t(n * K + k)];
      y[size_t(m * N + n)] = round_through(gp.dtype, float(acc));
    }
  return Tensor::from_vector(y, shape);
}

void run_fused_reference(const FusedProgram& p, const std::vector<Tensor>& leaves_in, Tensor& out) {
  check(out.is_contiguous(), "compile", "fused output must be contiguous");
  std::vector<Tensor> leaves = leaves_in;
  if (p.norm) leaves[size_t(p.norm->leaf)] = reference_norm(*p.norm, leaves_in, out.shape());
  if (p.gemm) leaves[size_t(p.gemm->leaf)] = reference_linear(*p.gemm, leaves_in, out.shape());
  const Shape& S = out.shape();
  const int64_t rank = int64_t(S.size()), total = out.numel();
  std::vector<Shape> strides(leaves.size());  // of the leaves the program loads (not a prologue's inputs)
  for (const Instr& in : p.code)
    if (in.op == Instr::Op::load) strides[size_t(in.a)] = leaves[size_t(in.a)].expand(S).strides();
  std::vector<float> reg(p.code.size());
  std::vector<int64_t> idx(size_t(rank), 0);
  for (int64_t e = 0; e < total; ++e) {
    for (size_t k = 0; k < p.code.size(); ++k) {
      const Instr& in = p.code[k];
      float v = 0.f;
      switch (in.op) {
        case Instr::Op::load: {
          const Tensor& t = leaves[size_t(in.a)];
          int64_t off = t.offset();
          for (int64_t d = 0; d < rank; ++d) off += idx[size_t(d)] * strides[size_t(in.a)][size_t(d)];
          v = float(load_as_double(t.storage()->data(), t.dtype(), off));
          break;
        }
        case Instr::Op::binary: v = binary_ref(in.fn, reg[size_t(in.a)], reg[size_t(in.b)]); break;
        case Instr::Op::scalar: v = scalar_ref(in.fn, reg[size_t(in.a)], in.s0); break;
        case Instr::Op::clamp: {
          const float x = reg[size_t(in.a)];
          v = std::isnan(x) ? x : std::min(std::max(x, in.s0), in.s1);
          break;
        }
        case Instr::Op::unary: v = unary_ref(in.fn, reg[size_t(in.a)]); break;
        case Instr::Op::cast: v = reg[size_t(in.a)]; break;
      }
      reg[k] = round_through(in.dtype, v);
    }
    store_from_double(out.data_ptr(), out.dtype(), e, double(reg.back()));
    for (int64_t d = rank - 1; d >= 0; --d) {
      if (++idx[size_t(d)] < S[size_t(d)]) break;
      idx[size_t(d)] = 0;
    }
  }
}

void run_norm_rope_reference(const NormRope& p, const std::vector<Tensor>& leaves, Tensor& out) {
  check(out.is_contiguous() && out.dim() == 4, "compile", "norm_rope output must be contiguous [B, S, H, D]");
  const int64_t B = out.size(0), S = out.size(1), H = out.size(2), D = out.size(3);
  const auto cs = leaves[size_t(p.cos)].contiguous().to_f64_vector();
  const auto sn = leaves[size_t(p.sin)].contiguous().to_f64_vector();
  std::vector<double> y(static_cast<size_t>(D));
  for (const NormRope::Segment& seg : p.segments) {
    const auto xv = leaves[size_t(seg.x)].contiguous().to_f64_vector();  // [B, len, H, D]
    std::vector<double> w(static_cast<size_t>(D), 1.0);
    if (seg.w >= 0) w = leaves[size_t(seg.w)].contiguous().to_f64_vector();
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < seg.len; ++i)
        for (int64_t h = 0; h < H; ++h) {
          const double* row = xv.data() + ((b * seg.len + i) * H + h) * D;
          double q = 0;
          for (int64_t d = 0; d < D; ++d) q += row[d] * row[d];
          const double rstd = 1.0 / std::sqrt(q / double(D) + seg.eps);
          for (int64_t d = 0; d < D; ++d) y[size_t(d)] = round_through(p.norm_dtype, float(row[d] * rstd * w[size_t(d)]));
          const int64_t s = seg.s0 + i, o = ((b * S + s) * H + h) * D;
          for (int64_t d = 0; d < D; d += 2) {
            const double c0 = cs[size_t(s * D + d)], c1 = cs[size_t(s * D + d + 1)];
            const double s0 = sn[size_t(s * D + d)], s1 = sn[size_t(s * D + d + 1)];
            const double a = y[size_t(d)], bb = y[size_t(d + 1)];
            store_from_double(out.data_ptr(), out.dtype(), o + d, double(round_through(out.dtype(), float(a * c0 - bb * s0))));
            store_from_double(out.data_ptr(), out.dtype(), o + d + 1, double(round_through(out.dtype(), float(bb * c1 + a * s1))));
          }
        }
  }
}

}  // namespace diffq::compile
