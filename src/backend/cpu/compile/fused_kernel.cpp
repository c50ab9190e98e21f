// The fused elementwise kernel. Each instruction runs the eager CPU kernels' own f32 row code
// (backend/cpu/row_kernels.h: the same Highway functions, runtime-dispatched) on chunks of the output,
// with one rounding per op to its dtype, so a fused graph gives the eager result.
#include "backend/cpu/compile/fused_kernel.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/cpu/linear.h"
#include "backend/cpu/quant/linear_q_parts.h"
#include "backend/cpu/row_kernels.h"
#include "compile/passes.h"
#include "core/thread_pool.h"
#include "diffq/error.h"

namespace diffq::backend::cpu {

using compile::FusedProgram;
using compile::GemmPrologue;
using compile::Instr;
using compile::NormPrologue;
using compile::NormRope;
using compile::QuantizedLinear;

namespace {
constexpr int64_t kChunk = 512;

void round_chunk(float* r, int64_t n, DType t) {
  if (t == DType::bf16)
    for (int64_t i = 0; i < n; ++i) r[i] = bf16_to_f32(f32_to_bf16(r[i]));
  else if (t == DType::f16)
    for (int64_t i = 0; i < n; ++i) r[i] = f16_to_f32(f32_to_f16(r[i]));
}

void load_chunk(const Tensor& t, int64_t off, int64_t stride, float* dst, int64_t n) {
  const void* base = t.storage()->data();
  if (stride == 0) {
    std::fill(dst, dst + n, float(load_as_double(base, t.dtype(), off)));
    return;
  }
  switch (t.dtype()) {
    case DType::f32: {
      const float* p = static_cast<const float*>(base) + off;
      if (stride == 1) std::memcpy(dst, p, size_t(n) * sizeof(float));
      else for (int64_t i = 0; i < n; ++i) dst[i] = p[i * stride];
      return;
    }
    case DType::bf16: {
      const uint16_t* p = static_cast<const uint16_t*>(base) + off;
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(p[i * stride]);
      return;
    }
    case DType::f16: {
      const uint16_t* p = static_cast<const uint16_t*>(base) + off;
      for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(p[i * stride]);
      return;
    }
    default:
      for (int64_t i = 0; i < n; ++i) dst[i] = float(load_as_double(base, t.dtype(), off + i * stride));
  }
}

void store_chunk(const float* src, Tensor& out, int64_t off, int64_t n) {
  void* base = out.data_ptr();
  switch (out.dtype()) {
    case DType::f32: std::memcpy(static_cast<float*>(base) + off, src, size_t(n) * sizeof(float)); return;
    case DType::bf16: {
      uint16_t* p = static_cast<uint16_t*>(base) + off;
      for (int64_t i = 0; i < n; ++i) p[i] = f32_to_bf16(src[i]);
      return;
    }
    case DType::f16: {
      uint16_t* p = static_cast<uint16_t*>(base) + off;
      for (int64_t i = 0; i < n; ++i) p[i] = f32_to_f16(src[i]);
      return;
    }
    default:
      for (int64_t i = 0; i < n; ++i) store_from_double(base, out.dtype(), off + i, double(src[i]));
  }
}

void exec_instr(const Instr& in, float* regs, int64_t k, int64_t n) {
  float* y = regs + k * kChunk;
  const float* a = regs + int64_t(in.a) * kChunk;
  switch (in.op) {
    case Instr::Op::load: return;
    case Instr::Op::binary: binary_row_f32(ops::BinaryFn(in.fn), a, false, regs + int64_t(in.b) * kChunk, false, y, n); break;
    case Instr::Op::scalar:
      switch (ops::ScalarFn(in.fn)) {
        case ops::ScalarFn::add: affine_clamp_row_f32(a, y, n, 1.f, in.s0, false, 0.f, 0.f); break;
        case ops::ScalarFn::mul: affine_clamp_row_f32(a, y, n, in.s0, 0.f, false, 0.f, 0.f); break;
        case ops::ScalarFn::rsub: affine_clamp_row_f32(a, y, n, -1.f, in.s0, false, 0.f, 0.f); break;
        case ops::ScalarFn::pow:
          if (in.s0 == 2.f) for (int64_t i = 0; i < n; ++i) y[i] = a[i] * a[i];
          else if (in.s0 == 0.5f) for (int64_t i = 0; i < n; ++i) y[i] = std::sqrt(a[i]);
          else if (in.s0 == 1.f) std::memmove(y, a, size_t(n) * sizeof(float));
          else for (int64_t i = 0; i < n; ++i) y[i] = std::pow(a[i], in.s0);
          break;
      }
      break;
    case Instr::Op::clamp: affine_clamp_row_f32(a, y, n, 1.f, 0.f, true, in.s0, in.s1); break;
    case Instr::Op::unary: unary_row_f32(ops::UnaryFn(in.fn), a, y, n); break;
    case Instr::Op::cast: std::memmove(y, a, size_t(n) * sizeof(float)); break;
  }
  round_chunk(y, n, in.dtype);
}
// With a norm prologue: one output row (last dim) at a time; the normalised row is computed first
// (statistics as the eager kernel), rounded to the norm's dtype, then the program runs over the row.
void run_fused_rows(const FusedProgram& p, const std::vector<Tensor>& leaves, Tensor& out) {
  const NormPrologue& np = *p.norm;
  const Shape& shape = out.shape();
  const int64_t D = shape.back(), rows = out.numel() / D, rank = int64_t(shape.size());
  std::vector<Shape> st;
  for (const Tensor& t : leaves) st.push_back(t.expand(shape).strides());
  const Shape& ost = out.strides();  // last stride 1 (run_fused checks)
  auto f32_row = [&](int32_t leaf) {  // w / b as f32 vectors (broadcast to [D])
    std::vector<float> v(static_cast<size_t>(D));
    if (leaf >= 0) load_chunk(leaves[size_t(leaf)], leaves[size_t(leaf)].offset(), st[size_t(leaf)].back(), v.data(), D);
    return v;
  };
  const std::vector<float> w = f32_row(np.w), b = f32_row(np.b);
  const size_t nreg = p.code.size();
  core::parallel_for(rows, std::max<int64_t>(1, 8192 / std::max<int64_t>(D, 1)), [&](int64_t r0, int64_t r1) {
    std::vector<float> regs(nreg * size_t(kChunk)), xr(static_cast<size_t>(D)), yr(static_cast<size_t>(D));
    std::vector<int64_t> base(leaves.size());
    for (int64_t r = r0; r < r1; ++r) {
      for (size_t l = 0; l < leaves.size(); ++l) base[l] = leaves[l].offset();
      int64_t rem = r, orow = 0;
      for (int64_t d = rank - 2; d >= 0; --d) {
        const int64_t i = rem % shape[size_t(d)];
        rem /= shape[size_t(d)];
        for (size_t l = 0; l < leaves.size(); ++l) base[l] += i * st[l][size_t(d)];
        orow += i * ost[size_t(d)];
      }
      load_chunk(leaves[size_t(np.x)], base[size_t(np.x)], st[size_t(np.x)].back(), xr.data(), D);
      double s = 0, q = 0;
      float mean = 0;
      if (!np.rms) {
        sum_and_squares_f32(xr.data(), D, 0.f, &s, &q);
        mean = float(s / double(D));
      }
      sum_and_squares_f32(xr.data(), D, mean, &s, &q);
      const float rstd = float(1.0 / std::sqrt(q / double(D) + np.eps));
      normalize_row_f32(xr.data(), yr.data(), D, mean, rstd, np.w >= 0 ? w.data() : nullptr,
                                           np.b >= 0 ? b.data() : nullptr);
      round_chunk(yr.data(), D, np.dtype);
      for (int64_t c0 = 0; c0 < D; c0 += kChunk) {
        const int64_t n = std::min(kChunk, D - c0);
        for (size_t k = 0; k < nreg; ++k) {
          const Instr& in = p.code[k];
          float* dst = regs.data() + int64_t(k) * kChunk;
          if (in.op != Instr::Op::load) exec_instr(in, regs.data(), int64_t(k), n);
          else if (in.a == np.leaf) std::memcpy(dst, yr.data() + c0, size_t(n) * sizeof(float));
          else {
            const int64_t s1 = st[size_t(in.a)].back();
            load_chunk(leaves[size_t(in.a)], base[size_t(in.a)] + c0 * s1, s1, dst, n);
          }
        }
        store_chunk(regs.data() + int64_t(nreg - 1) * kChunk, out, orow + c0, n);
      }
    }
  });
}

// With a GEMM prologue: the linear runs part by part (linear.h, or quant/linear_q_parts.h);
// right after each part of
// its output is computed, the program runs on the same rows x cols of the output, row by row, reading
// the part (rounded to the linear's dtype) for the GEMM leaf. When both the linear and the node are f32
// the part is computed straight into the output and the program overwrites it (each chunk is loaded
// before it is stored; the planner never lets this node overwrite another input); otherwise a
// per-thread scratch tile holds it.
void run_fused_gemm(const FusedProgram& p, const std::vector<Tensor>& leaves, Tensor& out,
                    const QuantizedLinear* qlinear) {
  const GemmPrologue& gp = *p.gemm;
  const Shape& shape = out.shape();
  const int64_t rank = int64_t(shape.size());
  std::vector<Shape> st(leaves.size());
  for (const Instr& in : p.code)
    if (in.op == Instr::Op::load && in.a != gp.leaf && st[size_t(in.a)].empty())
      st[size_t(in.a)] = leaves[size_t(in.a)].expand(shape).strides();
  const bool direct = out.dtype() == DType::f32 && gp.dtype == DType::f32;
  float* const out_f32 = direct ? out.data<float>() : nullptr;
  const int64_t ldo = compile::uniform_row_stride(shape, out.strides());  // D when contiguous; a concat's width when placed
  check(ldo >= 0, "compile", "a GEMM-prologue node's output rows must be one stride apart, got ", out.str());
  const size_t nreg = p.code.size();
  GemmParts parts;
  parts.begin = [&](int64_t r0, int64_t r1, int64_t c0, int64_t c1, int64_t* ld) -> float* {
    if (direct) {
      *ld = ldo;
      return out_f32 + r0 * ldo + c0;
    }
    thread_local std::vector<float> tile;
    tile.resize(size_t((r1 - r0) * (c1 - c0)));
    *ld = c1 - c0;
    return tile.data();
  };
  parts.end = [&](int64_t r0, int64_t r1, int64_t c0, int64_t c1, const float* part, int64_t ld) {
    std::vector<float> regs(nreg * size_t(kChunk));
    std::vector<int64_t> base(leaves.size(), 0);
    for (int64_t r = r0; r < r1; ++r) {
      for (size_t l = 0; l < leaves.size(); ++l)
        if (!st[l].empty()) base[l] = leaves[l].offset();
      int64_t rem = r;
      for (int64_t d = rank - 2; d >= 0; --d) {
        const int64_t i = rem % shape[size_t(d)];
        rem /= shape[size_t(d)];
        for (size_t l = 0; l < leaves.size(); ++l)
          if (!st[l].empty()) base[l] += i * st[l][size_t(d)];
      }
      for (int64_t c = c0; c < c1; c += kChunk) {
        const int64_t n = std::min(kChunk, c1 - c);
        for (size_t k = 0; k < nreg; ++k) {
          const Instr& in = p.code[k];
          float* dst = regs.data() + int64_t(k) * kChunk;
          if (in.op != Instr::Op::load) {
            exec_instr(in, regs.data(), int64_t(k), n);
          } else if (in.a == gp.leaf) {
            std::memcpy(dst, part + (r - r0) * ld + (c - c0), size_t(n) * sizeof(float));
            round_chunk(dst, n, gp.dtype);
          } else {
            const int64_t s1 = st[size_t(in.a)].back();
            load_chunk(leaves[size_t(in.a)], base[size_t(in.a)] + c * s1, s1, dst, n);
          }
        }
        store_chunk(regs.data() + int64_t(nreg - 1) * kChunk, out, r * ldo + c, n);
      }
    }
  };
  if (!gp.module.empty()) {
    check(qlinear != nullptr && (qlinear->weight != nullptr || qlinear->dense.defined()), "compile",
          "the quantized GEMM prologue of '", gp.module, "' has no weight bound");
    if (qlinear->weight) linear_q_parts(*qlinear->weight, leaves[size_t(gp.x)], qlinear->bias, parts);
    else linear_parts(leaves[size_t(gp.x)], qlinear->dense, qlinear->bias, parts);  // packed at capture, dense now
    return;
  }
  const Tensor bias = gp.b >= 0 ? leaves[size_t(gp.b)] : Tensor();
  linear_parts(leaves[size_t(gp.x)], leaves[size_t(gp.w)], bias, parts);
}

// [rows, D] of a 2-D leaf (cos / sin tables) as contiguous f32.
std::vector<float> f32_table(const Tensor& t) {
  const int64_t rows = t.size(0), D = t.size(1);
  std::vector<float> v(size_t(rows * D));
  for (int64_t r = 0; r < rows; ++r) load_chunk(t, t.offset() + r * t.strides()[0], t.strides()[1], v.data() + r * D, D);
  return v;
}

}  // namespace

void run_norm_rope(const NormRope& p, const std::vector<Tensor>& leaves, Tensor& out) {
  check(out.dim() == 4 && out.strides()[3] == 1, "compile", "norm_rope output must be [B, S, H, D] with rows of D, got ",
        out.str());
  const Shape& ost = out.strides();
  const int64_t S = out.size(1), H = out.size(2), D = out.size(3), rows = out.numel() / std::max<int64_t>(D, 1);
  if (rows == 0 || D == 0) return;
  const std::vector<float> cs = f32_table(leaves[size_t(p.cos)]), sn = f32_table(leaves[size_t(p.sin)]);
  std::vector<std::vector<float>> w(p.segments.size());
  for (size_t k = 0; k < p.segments.size(); ++k)
    if (p.segments[k].w >= 0) {
      const Tensor& wt = leaves[size_t(p.segments[k].w)];
      w[k].resize(static_cast<size_t>(D));
      load_chunk(wt, wt.offset(), wt.strides()[0], w[k].data(), D);
    }
  core::parallel_for(rows, std::max<int64_t>(1, 8192 / D), [&](int64_t r0, int64_t r1) {
    std::vector<float> xr(static_cast<size_t>(D)), yr(static_cast<size_t>(D)), zr(static_cast<size_t>(D));
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t h = r % H, s = (r / H) % S, b = r / (H * S);
      size_t k = 0;
      while (k + 1 < p.segments.size() && s >= p.segments[k + 1].s0) ++k;
      const NormRope::Segment& seg = p.segments[k];
      const Tensor& x = leaves[size_t(seg.x)];
      const Shape& st = x.strides();
      load_chunk(x, x.offset() + b * st[0] + (s - seg.s0) * st[1] + h * st[2], st[3], xr.data(), D);
      double sum = 0, q = 0;
      sum_and_squares_f32(xr.data(), D, 0.f, &sum, &q);
      const float rstd = float(1.0 / std::sqrt(q / double(D) + seg.eps));
      normalize_row_f32(xr.data(), yr.data(), D, 0.f, rstd, seg.w >= 0 ? w[k].data() : nullptr, nullptr);
      round_chunk(yr.data(), D, p.norm_dtype);
      rope_row_f32(yr.data(), cs.data() + s * D, sn.data() + s * D, zr.data(), D);
      store_chunk(zr.data(), out, b * ost[0] + s * ost[1] + h * ost[2], D);
    }
  });
}

void run_fused(const FusedProgram& p, const std::vector<Tensor>& leaves, Tensor& out, const QuantizedLinear* qlinear) {
  // Contiguous, or a strided view with rows of the last dim (a slice of an elided concat's buffer).
  check(out.is_contiguous() || (out.dim() > 0 && out.strides().back() == 1), "compile",
        "fused output rows must be contiguous, got ", out.str());
  if (out.numel() == 0) return;
  if (p.norm) return run_fused_rows(p, leaves, out);
  if (p.gemm) return run_fused_gemm(p, leaves, out, qlinear);
  // Broadcast strides of every operand over out's shape, then merge dims that are contiguous for all.
  Shape shape = out.shape();
  std::vector<Shape> st;
  for (const Tensor& t : leaves) st.push_back(t.expand(shape).strides());
  st.push_back(out.strides());
  Shape cs;
  std::vector<Shape> cst(st.size());
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    bool merge = !cs.empty();
    for (size_t o = 0; merge && o < st.size(); ++o) merge = cst[o].back() == st[o][d] * shape[d];
    if (merge) {
      cs.back() *= shape[d];
      for (size_t o = 0; o < st.size(); ++o) cst[o].back() = st[o][d];
    } else {
      cs.push_back(shape[d]);
      for (size_t o = 0; o < st.size(); ++o) cst[o].push_back(st[o][d]);
    }
  }
  if (cs.empty()) {
    cs.push_back(1);
    for (auto& s : cst) s.push_back(0);
  }
  const int64_t inner = cs.back(), rows = out.numel() / inner;
  check(inner == 1 || cst.back().back() == 1, "compile", "fused output rows must be contiguous, got ", out.str());
  const int64_t per_row = (inner + kChunk - 1) / kChunk;
  const size_t nreg = p.code.size();
  core::parallel_for(rows * per_row, 4, [&](int64_t beg, int64_t end) {
    std::vector<float> regs(nreg * size_t(kChunk));
    std::vector<int64_t> base(leaves.size());
    const Shape& ocst = cst.back();
    for (int64_t it = beg; it < end; ++it) {
      const int64_t r = it / per_row, c0 = (it % per_row) * kChunk, n = std::min(kChunk, inner - c0);
      for (size_t l = 0; l < leaves.size(); ++l) base[l] = leaves[l].offset();
      int64_t rem = r, orow = 0;
      for (int64_t d = int64_t(cs.size()) - 2; d >= 0; --d) {
        const int64_t i = rem % cs[size_t(d)];
        rem /= cs[size_t(d)];
        for (size_t l = 0; l < leaves.size(); ++l) base[l] += i * cst[l][size_t(d)];
        orow += i * ocst[size_t(d)];
      }
      for (size_t k = 0; k < nreg; ++k) {
        const Instr& in = p.code[k];
        if (in.op == Instr::Op::load) {
          const int64_t s = cst[size_t(in.a)].back();
          load_chunk(leaves[size_t(in.a)], base[size_t(in.a)] + c0 * s, s, regs.data() + int64_t(k) * kChunk, n);
        } else {
          exec_instr(in, regs.data(), int64_t(k), n);
        }
      }
      store_chunk(regs.data() + int64_t(nreg - 1) * kChunk, out, orow + c0, n);
    }
  });
}

}  // namespace diffq::backend::cpu
