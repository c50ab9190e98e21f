// Unary float functions (activations and math), computed in f32 and rounded once to x's dtype.
// The activations of the FLUX/Wan/CLIP/T5 paths (silu, gelu_tanh, quick_gelu, exp, sigmoid, tanh)
// are vectorised with Highway's contrib math; gelu_erf, sin and cos use the C library per element.
// Contraction into fused multiply-adds is off for this file: each product and sum rounds where the
// formulas say (int8dq's activation codes flip under a 1-ulp change of GELU's output: with contraction the
// Wan int8dq test drifted from Diffusers by half as much again).
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
#include <memory>
#include <mutex>
#include <numeric>
#include <vector>

#include "backend/cpu/common.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/simd-inl.h"
#include "backend/cpu/activation-inl.h"

HWY_BEFORE_NAMESPACE();
namespace diffq::backend::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// f with NaN lanes passed through: Highway's emulated targets (EMU128, SCALAR) convert float lanes to int32
// with C++ casts inside Exp / Expm1, undefined for NaN (UBSan flags it); there f runs on those lanes replaced
// by 0 and they keep their NaN. The x86 targets' conversions are defined: f runs as it is.
template <class F>
HWY_INLINE auto NanPassing(F f) {
  return [f](auto d, auto v) {
#if HWY_TARGET == HWY_EMU128 || HWY_TARGET == HWY_SCALAR
    const auto nan = hn::IsNaN(v);
    return hn::IfThenElse(nan, v, f(d, hn::IfThenZeroElse(nan, v)));
#else
    return f(d, v);
#endif
  };
}

void UnaryF32(int64_t fn, const float* x, float* y, int64_t n) {
  switch (fn) {
    case 0:  // silu
      return MapF32(x, y, n, NanPassing([](auto d, auto v) { return Silu(d, v); }));
    case 1:  // gelu_tanh: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (activation-inl.h)
      return MapF32(x, y, n, NanPassing([](auto d, auto v) { return GeluTanh(d, v); }));
    case 3:  // quick_gelu
      return MapF32(x, y, n,
                    NanPassing([](auto d, auto v) { return hn::Mul(v, Sigmoid(d, hn::Mul(hn::Set(d, 1.702f), v))); }));
    case 4:  // exp
      return MapF32(x, y, n, NanPassing([](auto d, auto v) { return ExpSafe(d, v); }));
    case 5:  // neg
      return MapF32(x, y, n, [](auto, auto v) { return hn::Neg(v); });
    case 6:  // sqrt
      return MapF32(x, y, n, [](auto, auto v) { return hn::Sqrt(v); });
    case 7:  // rsqrt
      return MapF32(x, y, n, [](auto d, auto v) { return hn::Div(hn::Set(d, 1.f), hn::Sqrt(v)); });
    case 8:  // tanh
      return MapF32(x, y, n, NanPassing([](auto d, auto v) { return hn::Tanh(d, v); }));
    case 9:  // sigmoid
      return MapF32(x, y, n, NanPassing([](auto d, auto v) { return Sigmoid(d, v); }));
    case 12:  // abs
      return MapF32(x, y, n, [](auto, auto v) { return hn::Abs(v); });
    case 13:  // square
      return MapF32(x, y, n, [](auto, auto v) { return hn::Mul(v, v); });
    default: break;
  }
}

// This target's bf16 table of fn (row_kernels.h bf16_unary_table): the statics are per target, each
// filled through the unary op's chunk step (map_f32_chunk) and row function (unary_row_f32, whose dispatch
// runs this same target: this function is only reached through the dispatch).
const uint16_t* Bf16UnaryTable(int64_t fn) {
  constexpr int64_t kFns = int64_t(ops::UnaryFn::square) + 1, kValues = int64_t(1) << 16;
  static std::once_flag once[kFns];
  static std::unique_ptr<uint16_t[]> tables[kFns];
  std::call_once(once[fn], [fn] {
    const auto f = [fn](const float* x, float* y, int64_t n) { unary_row_f32(ops::UnaryFn(fn), x, y, n); };
    std::vector<uint16_t> bits(static_cast<size_t>(kValues));
    std::iota(bits.begin(), bits.end(), uint16_t(0));
    auto t = std::make_unique<uint16_t[]>(size_t(kValues + 1));
    for (int64_t c0 = 0; c0 < kValues; c0 += kMapChunk)
      map_f32_chunk(bits.data() + c0, DType::bf16, 1, t.get() + c0, DType::bf16, kMapChunk, f);
    t[size_t(kValues)] = 0;
    tables[fn] = std::move(t);
  });
  return tables[fn].get();
}

}  // namespace HWY_NAMESPACE
}  // namespace diffq::backend::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace diffq::backend::cpu {

HWY_EXPORT(UnaryF32);
HWY_EXPORT(Bf16UnaryTable);

const uint16_t* bf16_unary_table(ops::UnaryFn fn) { return HWY_DYNAMIC_DISPATCH(Bf16UnaryTable)(int64_t(fn)); }

void bf16_table_row(const uint16_t* table, const uint16_t* x, int64_t stride, uint16_t* y, int64_t n) {
  // Plain loads: as fast as AVX-512 / AVX2 gathers here (a scratch comparison on the AMX Xeon), on any CPU.
  for (int64_t i = 0; i < n; ++i) y[i] = table[x[i * stride]];
}

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

void unary_rows_in_place(ops::UnaryFn fn, DType dt, void* y, int64_t ld, int64_t rows, int64_t cols) {
  if (dt == DType::bf16) {  // the unary kernel's table
    const uint16_t* table = bf16_unary_table(fn);
    for (int64_t r = 0; r < rows; ++r) {
      auto* p = static_cast<uint16_t*>(y) + r * ld;
      bf16_table_row(table, p, 1, p, cols);
    }
    return;
  }
  // The unary kernel's chunks (map_f32_chunk), in place.
  const auto f = [fn](const float* x, float* out, int64_t n) { unary_row_f32(fn, x, out, n); };
  const int64_t es = int64_t(dtype_size(dt));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c0 = 0; c0 < cols; c0 += kMapChunk) {
      auto* p = static_cast<uint8_t*>(y) + (r * ld + c0) * es;
      map_f32_chunk(p, dt, 1, p, dt, std::min(kMapChunk, cols - c0), f);
    }
}

namespace {

void unary_kernel(const OpCall& c, Tensor& out) {
  const auto fn = ops::UnaryFn(c.attrs.i0);
  if (c.inputs[0].dtype() == DType::bf16 && out.dtype() == DType::bf16) {  // by the function's table
    const uint16_t* table = bf16_unary_table(fn);
    for_each_map_chunk(c.inputs[0], out, [table](const uint8_t* x, int64_t stride, uint8_t* y, int64_t n) {
      bf16_table_row(table, reinterpret_cast<const uint16_t*>(x), stride, reinterpret_cast<uint16_t*>(y), n);
    });
    return;
  }
  // Other dtypes through f32 staging rows (convert.cpp map_f32).
  map_f32(c.inputs[0], out, [fn](const float* x, float* y, int64_t n) { unary_row_f32(fn, x, y, n); });
}

}  // namespace

void register_unary_kernels() { ops::register_kernel(OpKind::unary, DeviceKind::cpu, unary_kernel); }

}  // namespace diffq::backend::cpu
#endif  // HWY_ONCE
