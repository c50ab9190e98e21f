// The fused elementwise kernel (Highway, runtime-dispatched like the CPU backend's kernels). The math
// of each instruction matches the eager CPU kernels (backend/cpu/elementwise.cpp, unary.cpp): f32
// compute, Highway's Exp/Tanh for the activations, the C library for erf/sin/cos/pow, one rounding
// per op to its dtype, so a fused graph gives the eager result.
#include "backend/cpu/hwy_config.h"
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "compile/fused_kernel.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/cpu/threads.h"
#include "compile/fused_kernel.h"
#include "diffq/error.h"

HWY_BEFORE_NAMESPACE();
namespace diffq::compile {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

template <class F>
HWY_INLINE void Map1(const float* x, float* y, int64_t n, F f) {
  const hn::ScalableTag<float> d;
  const int64_t N = int64_t(hn::Lanes(d));
  int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(f(d, hn::LoadU(d, x + i)), d, y + i);
  if (i < n) {
    HWY_ALIGN float buf[hn::MaxLanes(d)] = {};
    std::memcpy(buf, x + i, size_t(n - i) * sizeof(float));
    const auto v = f(d, hn::Load(d, buf));
    hn::Store(v, d, buf);
    std::memcpy(y + i, buf, size_t(n - i) * sizeof(float));
  }
}

template <class F>
HWY_INLINE void Map2(const float* a, const float* b, float* y, int64_t n, F f) {
  const hn::ScalableTag<float> d;
  const int64_t N = int64_t(hn::Lanes(d));
  int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(f(d, hn::LoadU(d, a + i), hn::LoadU(d, b + i)), d, y + i);
  for (; i < n; ++i) {  // tail, one lane at a time through the same vector code
    const auto v = f(d, hn::Set(d, a[i]), hn::Set(d, b[i]));
    y[i] = hn::GetLane(v);
  }
}

template <class D, class V>
HWY_INLINE V Sigmoid(D d, V x) {
  const V one = hn::Set(d, 1.f);
  return hn::Div(one, hn::Add(one, hn::Exp(d, hn::Min(hn::Neg(x), hn::Set(d, 88.f)))));
}

void UnaryChunk(int64_t fn, const float* x, float* y, int64_t n) {
  switch (ops::UnaryFn(fn)) {
    case ops::UnaryFn::silu: return Map1(x, y, n, [](auto d, auto v) { return hn::Mul(v, Sigmoid(d, v)); });
    case ops::UnaryFn::gelu_tanh:
      return Map1(x, y, n, [](auto d, auto v) {
        const auto k0 = hn::Set(d, 0.7978845608028654f), k1 = hn::Set(d, 0.044715f);
        const auto inner = hn::Mul(k0, hn::MulAdd(hn::Mul(k1, hn::Mul(v, v)), v, v));
        const auto half_v = hn::Mul(hn::Set(d, 0.5f), v);
        return hn::MulAdd(half_v, hn::Tanh(d, inner), half_v);
      });
    case ops::UnaryFn::quick_gelu:
      return Map1(x, y, n, [](auto d, auto v) { return hn::Mul(v, Sigmoid(d, hn::Mul(hn::Set(d, 1.702f), v))); });
    case ops::UnaryFn::exp:
      return Map1(x, y, n, [](auto d, auto v) {
        return hn::IfThenElse(hn::IsNaN(v), v, hn::Exp(d, hn::Min(v, hn::Set(d, 100.f))));
      });
    case ops::UnaryFn::neg: return Map1(x, y, n, [](auto, auto v) { return hn::Neg(v); });
    case ops::UnaryFn::sqrt: return Map1(x, y, n, [](auto, auto v) { return hn::Sqrt(v); });
    case ops::UnaryFn::rsqrt: return Map1(x, y, n, [](auto d, auto v) { return hn::Div(hn::Set(d, 1.f), hn::Sqrt(v)); });
    case ops::UnaryFn::tanh: return Map1(x, y, n, [](auto d, auto v) { return hn::Tanh(d, v); });
    case ops::UnaryFn::sigmoid: return Map1(x, y, n, [](auto d, auto v) { return Sigmoid(d, v); });
    case ops::UnaryFn::abs: return Map1(x, y, n, [](auto, auto v) { return hn::Abs(v); });
    case ops::UnaryFn::square: return Map1(x, y, n, [](auto, auto v) { return hn::Mul(v, v); });
    case ops::UnaryFn::gelu_erf:
      for (int64_t i = 0; i < n; ++i) y[i] = 0.5f * x[i] * (1.f + std::erf(x[i] * 0.70710678118654752f));
      return;
    case ops::UnaryFn::sin:
      for (int64_t i = 0; i < n; ++i) y[i] = std::sin(x[i]);
      return;
    case ops::UnaryFn::cos:
      for (int64_t i = 0; i < n; ++i) y[i] = std::cos(x[i]);
      return;
  }
}

template <class D, class V>
HWY_INLINE V MaxNaN(D, V a, V b) {
  return hn::IfThenElse(hn::IsNaN(a), a, hn::IfThenElse(hn::IsNaN(b), b, hn::Max(a, b)));
}
template <class D, class V>
HWY_INLINE V MinNaN(D, V a, V b) {
  return hn::IfThenElse(hn::IsNaN(a), a, hn::IfThenElse(hn::IsNaN(b), b, hn::Min(a, b)));
}

void BinaryChunk(int64_t fn, const float* a, const float* b, float* y, int64_t n) {
  switch (ops::BinaryFn(fn)) {
    case ops::BinaryFn::add: return Map2(a, b, y, n, [](auto, auto x, auto z) { return hn::Add(x, z); });
    case ops::BinaryFn::sub: return Map2(a, b, y, n, [](auto, auto x, auto z) { return hn::Sub(x, z); });
    case ops::BinaryFn::mul: return Map2(a, b, y, n, [](auto, auto x, auto z) { return hn::Mul(x, z); });
    case ops::BinaryFn::div: return Map2(a, b, y, n, [](auto, auto x, auto z) { return hn::Div(x, z); });
    case ops::BinaryFn::maximum: return Map2(a, b, y, n, [](auto d, auto x, auto z) { return MaxNaN(d, x, z); });
    case ops::BinaryFn::minimum: return Map2(a, b, y, n, [](auto d, auto x, auto z) { return MinNaN(d, x, z); });
  }
}

// y = x*mul + add, or clamp(x, lo, hi) (NaN stays NaN).
void AffineClampChunk(const float* x, float* y, int64_t n, float mul, float add, bool clamp, float lo, float hi) {
  Map1(x, y, n, [&](auto d, auto v) {
    if (!clamp) return hn::MulAdd(v, hn::Set(d, mul), hn::Set(d, add));
    const auto c = hn::Min(hn::Max(v, hn::Set(d, lo)), hn::Set(d, hi));
    return hn::IfThenElse(hn::IsNaN(v), v, c);
  });
}

// sum(x) and sum((x - shift)^2), two f32 accumulators per sum, lanes summed in double (as the eager
// norm kernel, backend/cpu/norm.cpp).
void SumAndSquaresChunk(const float* x, int64_t n, float shift, double* sum, double* sq) {
  const hn::ScalableTag<float> d;
  const int64_t N = int64_t(hn::Lanes(d));
  const auto vs = hn::Set(d, shift);
  auto a0 = hn::Zero(d), a1 = hn::Zero(d), q0 = hn::Zero(d), q1 = hn::Zero(d);
  int64_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    const auto v0 = hn::LoadU(d, x + i), v1 = hn::LoadU(d, x + i + N);
    a0 = hn::Add(a0, v0);
    a1 = hn::Add(a1, v1);
    const auto c0 = hn::Sub(v0, vs), c1 = hn::Sub(v1, vs);
    q0 = hn::MulAdd(c0, c0, q0);
    q1 = hn::MulAdd(c1, c1, q1);
  }
  HWY_ALIGN float la[hn::MaxLanes(d)], lq[hn::MaxLanes(d)];
  hn::Store(hn::Add(a0, a1), d, la);
  hn::Store(hn::Add(q0, q1), d, lq);
  double s = 0, q = 0;
  for (int64_t k = 0; k < N; ++k) {
    s += la[k];
    q += lq[k];
  }
  for (; i < n; ++i) {
    s += x[i];
    q += double(x[i] - shift) * double(x[i] - shift);
  }
  *sum = s;
  *sq = q;
}

// y = (x - mean) * rstd (* w) (+ b)
void NormalizeChunk(const float* x, float* y, int64_t n, float mean, float rstd, const float* w, const float* b) {
  const hn::ScalableTag<float> d;
  const int64_t N = int64_t(hn::Lanes(d));
  const auto vm = hn::Set(d, mean), vr = hn::Set(d, rstd);
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    auto v = hn::Mul(hn::Sub(hn::LoadU(d, x + i), vm), vr);
    if (w) v = hn::Mul(v, hn::LoadU(d, w + i));
    if (b) v = hn::Add(v, hn::LoadU(d, b + i));
    hn::StoreU(v, d, y + i);
  }
  for (; i < n; ++i) {
    float v = (x[i] - mean) * rstd;
    if (w) v *= w[i];
    if (b) v += b[i];
    y[i] = v;
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace diffq::compile
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace diffq::compile {

HWY_EXPORT(UnaryChunk);
HWY_EXPORT(BinaryChunk);
HWY_EXPORT(AffineClampChunk);
HWY_EXPORT(SumAndSquaresChunk);
HWY_EXPORT(NormalizeChunk);

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
    case Instr::Op::binary: HWY_DYNAMIC_DISPATCH(BinaryChunk)(in.fn, a, regs + int64_t(in.b) * kChunk, y, n); break;
    case Instr::Op::scalar:
      switch (ops::ScalarFn(in.fn)) {
        case ops::ScalarFn::add: HWY_DYNAMIC_DISPATCH(AffineClampChunk)(a, y, n, 1.f, in.s0, false, 0.f, 0.f); break;
        case ops::ScalarFn::mul: HWY_DYNAMIC_DISPATCH(AffineClampChunk)(a, y, n, in.s0, 0.f, false, 0.f, 0.f); break;
        case ops::ScalarFn::rsub: HWY_DYNAMIC_DISPATCH(AffineClampChunk)(a, y, n, -1.f, in.s0, false, 0.f, 0.f); break;
        case ops::ScalarFn::pow:
          if (in.s0 == 2.f) for (int64_t i = 0; i < n; ++i) y[i] = a[i] * a[i];
          else if (in.s0 == 0.5f) for (int64_t i = 0; i < n; ++i) y[i] = std::sqrt(a[i]);
          else if (in.s0 == 1.f) std::memmove(y, a, size_t(n) * sizeof(float));
          else for (int64_t i = 0; i < n; ++i) y[i] = std::pow(a[i], in.s0);
          break;
      }
      break;
    case Instr::Op::clamp: HWY_DYNAMIC_DISPATCH(AffineClampChunk)(a, y, n, 1.f, 0.f, true, in.s0, in.s1); break;
    case Instr::Op::unary: HWY_DYNAMIC_DISPATCH(UnaryChunk)(in.fn, a, y, n); break;
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
  auto f32_row = [&](int32_t leaf) {  // w / b as f32 vectors (broadcast to [D])
    std::vector<float> v(static_cast<size_t>(D));
    if (leaf >= 0) load_chunk(leaves[size_t(leaf)], leaves[size_t(leaf)].offset(), st[size_t(leaf)].back(), v.data(), D);
    return v;
  };
  const std::vector<float> w = f32_row(np.w), b = f32_row(np.b);
  const size_t nreg = p.code.size();
  backend::cpu::parallel_for(rows, std::max<int64_t>(1, 8192 / std::max<int64_t>(D, 1)), [&](int64_t r0, int64_t r1) {
    std::vector<float> regs(nreg * size_t(kChunk)), xr(static_cast<size_t>(D)), yr(static_cast<size_t>(D));
    std::vector<int64_t> base(leaves.size());
    for (int64_t r = r0; r < r1; ++r) {
      for (size_t l = 0; l < leaves.size(); ++l) base[l] = leaves[l].offset();
      int64_t rem = r;
      for (int64_t d = rank - 2; d >= 0; --d) {
        const int64_t i = rem % shape[size_t(d)];
        rem /= shape[size_t(d)];
        for (size_t l = 0; l < leaves.size(); ++l) base[l] += i * st[l][size_t(d)];
      }
      load_chunk(leaves[size_t(np.x)], base[size_t(np.x)], st[size_t(np.x)].back(), xr.data(), D);
      double s = 0, q = 0;
      float mean = 0;
      if (!np.rms) {
        HWY_DYNAMIC_DISPATCH(SumAndSquaresChunk)(xr.data(), D, 0.f, &s, &q);
        mean = float(s / double(D));
      }
      HWY_DYNAMIC_DISPATCH(SumAndSquaresChunk)(xr.data(), D, mean, &s, &q);
      const float rstd = float(1.0 / std::sqrt(q / double(D) + np.eps));
      HWY_DYNAMIC_DISPATCH(NormalizeChunk)(xr.data(), yr.data(), D, mean, rstd, np.w >= 0 ? w.data() : nullptr,
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
        store_chunk(regs.data() + int64_t(nreg - 1) * kChunk, out, r * D + c0, n);
      }
    }
  });
}

}  // namespace

void run_fused(const FusedProgram& p, const std::vector<Tensor>& leaves, Tensor& out) {
  check(out.is_contiguous(), "compile", "fused output must be contiguous");
  if (out.numel() == 0) return;
  if (p.norm) return run_fused_rows(p, leaves, out);
  // Broadcast strides of every operand over out's shape, then merge dims that are contiguous for all.
  Shape shape = out.shape();
  std::vector<Shape> st;
  for (const Tensor& t : leaves) st.push_back(t.expand(shape).strides());
  st.push_back(contiguous_strides(shape));
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
  const int64_t per_row = (inner + kChunk - 1) / kChunk;
  const size_t nreg = p.code.size();
  backend::cpu::parallel_for(rows * per_row, 4, [&](int64_t beg, int64_t end) {
    std::vector<float> regs(nreg * size_t(kChunk));
    std::vector<int64_t> base(leaves.size());
    for (int64_t it = beg; it < end; ++it) {
      const int64_t r = it / per_row, c0 = (it % per_row) * kChunk, n = std::min(kChunk, inner - c0);
      for (size_t l = 0; l < leaves.size(); ++l) base[l] = leaves[l].offset();
      int64_t rem = r;
      for (int64_t d = int64_t(cs.size()) - 2; d >= 0; --d) {
        const int64_t i = rem % cs[size_t(d)];
        rem /= cs[size_t(d)];
        for (size_t l = 0; l < leaves.size(); ++l) base[l] += i * cst[l][size_t(d)];
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
      store_chunk(regs.data() + int64_t(nreg - 1) * kChunk, out, r * inner + c0, n);
    }
  });
}

}  // namespace diffq::compile
#endif  // HWY_ONCE
