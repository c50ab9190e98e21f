// Unary float functions (activations and math), computed in f32 and rounded once to x's dtype.
// The activations of the FLUX/Wan/CLIP/T5 paths (silu, gelu_tanh, quick_gelu, exp, sigmoid, tanh)
// are vectorised with Highway's contrib math; gelu_erf, sin and cos use the C library per element.
// Contiguous bf16 rows are widened, computed and rounded in registers (UnaryBf16), other layouts go
// through f32 staging rows (map_f32): the same bits. Contraction into fused multiply-adds is off for
// this file: each product and sum rounds where the formulas say (GELU's bits follow them, and int8dq's
// activation codes flip under a 1-ulp change of its input).
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif
#include "backend/cpu/row_kernels.h"
#include "backend/cpu/hwy_config.h"
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backend/cpu/unary.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>

#include <algorithm>
#include <cmath>

#include "backend/cpu/common.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/threads.h"
#include "backend/cpu/simd-inl.h"
#include "backend/cpu/activation-inl.h"

HWY_BEFORE_NAMESPACE();
namespace diffq::backend::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Calls map(f) with the vector functor f(d, v) of fn (one definition for the f32 and bf16 rows); false
// for the functions computed per element in f32 (gelu_erf, sin, cos).
template <class Map>
HWY_INLINE bool WithUnaryFn(int64_t fn, const Map& map) {
  switch (fn) {
    case 0:  // silu
      map([](auto d, auto v) { return Silu(d, v); });
      return true;
    case 1:  // gelu_tanh: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
      map([](auto d, auto v) { return GeluTanh(d, v); });
      return true;
    case 3:  // quick_gelu
      map([](auto d, auto v) { return hn::Mul(v, Sigmoid(d, hn::Mul(hn::Set(d, 1.702f), v))); });
      return true;
    case 4:  // exp
      map([](auto d, auto v) { return ExpSafe(d, v); });
      return true;
    case 5:  // neg
      map([](auto, auto v) { return hn::Neg(v); });
      return true;
    case 6:  // sqrt
      map([](auto, auto v) { return hn::Sqrt(v); });
      return true;
    case 7:  // rsqrt
      map([](auto d, auto v) { return hn::Div(hn::Set(d, 1.f), hn::Sqrt(v)); });
      return true;
    case 8:  // tanh
      map([](auto d, auto v) { return hn::Tanh(d, v); });
      return true;
    case 9:  // sigmoid
      map([](auto d, auto v) { return Sigmoid(d, v); });
      return true;
    case 12:  // abs
      map([](auto, auto v) { return hn::Abs(v); });
      return true;
    case 13:  // square
      map([](auto, auto v) { return hn::Mul(v, v); });
      return true;
    default: return false;
  }
}

void UnaryF32(int64_t fn, const float* x, float* y, int64_t n) {
  WithUnaryFn(fn, [&](auto f) { MapF32(x, y, n, f); });
}

// bf16 rows: the same f32 functions on the widened lanes, rounded once in registers. False (nothing
// written) for the functions without a vector form.
bool UnaryBf16(int64_t fn, const uint16_t* x, uint16_t* y, int64_t n) {
  return WithUnaryFn(fn, [&](auto f) { MapBf16(x, y, n, f); });
}

}  // namespace HWY_NAMESPACE
}  // namespace diffq::backend::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace diffq::backend::cpu {

HWY_EXPORT(UnaryF32);
HWY_EXPORT(UnaryBf16);

void unary_row_f32(ops::UnaryFn fn, const float* x, float* y, int64_t n) {
  switch (fn) {
    case ops::UnaryFn::gelu_erf:
      for (int64_t i = 0; i < n; ++i) y[i] = 0.5f * x[i] * (1.f + std::erf(x[i] * 0.70710678118654752f));
      return;
    case ops::UnaryFn::sin:
      for (int64_t i = 0; i < n; ++i) y[i] = std::sin(x[i]);
      return;
    case ops::UnaryFn::cos:
      for (int64_t i = 0; i < n; ++i) y[i] = std::cos(x[i]);
      return;
    default: HWY_DYNAMIC_DISPATCH(UnaryF32)(int64_t(fn), x, y, n);
  }
}

void unary_row_bf16(ops::UnaryFn fn, const uint16_t* x, uint16_t* y, int64_t n) {
  if (HWY_DYNAMIC_DISPATCH(UnaryBf16)(int64_t(fn), x, y, n)) return;
  // gelu_erf, sin, cos: element by element in f32, as unary_row_f32
  float buf[kMapChunk];
  for (int64_t i0 = 0; i0 < n; i0 += kMapChunk) {
    const int64_t len = std::min(kMapChunk, n - i0);
    load_f32(x + i0, DType::bf16, 1, buf, len);
    unary_row_f32(fn, buf, buf, len);
    store_f32(buf, y + i0, DType::bf16, len);
  }
}

namespace {

// Elements per task of the bf16 rows' parallel loop.
constexpr int64_t kUnaryBf16Chunk = 8192;

void unary_kernel(const OpCall& c, Tensor& out) {
  const auto fn = ops::UnaryFn(c.attrs.i0);
  const Tensor& x = c.inputs[0];
  if (x.dtype() == DType::bf16 && out.dtype() == DType::bf16 && x.is_contiguous() && out.is_contiguous()) {
    // Contiguous bf16 in and out: widened, computed and rounded in registers (the same bits as the f32
    // staging rows below, in one pass).
    const auto* xp = x.data<uint16_t>();
    auto* yp = out.data<uint16_t>();
    const int64_t n = x.numel();
    parallel_for((n + kUnaryBf16Chunk - 1) / kUnaryBf16Chunk, 4, [&](int64_t b, int64_t e) {
      const int64_t i0 = b * kUnaryBf16Chunk, i1 = std::min(n, e * kUnaryBf16Chunk);
      unary_row_bf16(fn, xp + i0, yp + i0, i1 - i0);
    });
    return;
  }
  map_f32(x, out, [fn](const float* x, float* y, int64_t n) { unary_row_f32(fn, x, y, n); });
}

}  // namespace

void register_unary_kernels() { ops::register_kernel(OpKind::unary, DeviceKind::cpu, unary_kernel); }

}  // namespace diffq::backend::cpu
#endif  // HWY_ONCE
