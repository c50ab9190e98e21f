// The Int4 row dequantizer of torchao_int4_dequant.h: a Highway kernel (16 bytes -> 32 codes per step:
// nibbles sign-extended with shifts, interleaved back to column order, widened to f32, q * s then + z).
#include "backend/cpu/hwy_config.h"
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backend/cpu/quant/torchao_int4_dequant.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <type_traits>

#include "backend/cpu/quant/torchao_int4_dequant.h"

HWY_BEFORE_NAMESPACE();
namespace diffq::backend::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Keeps the compiler from contracting q * s + z into one FMA (GCC contracts across statements in C++
// even with -std=c++20): torchao/torch compute the product and the sum as two rounded ops.
template <class T>
HWY_INLINE T Unfused(T v) {
#if HWY_ARCH_X86 && HWY_TARGET != HWY_EMU128 && HWY_TARGET != HWY_SCALAR
  if constexpr (std::is_same_v<T, float>) {
    asm("" : "+x"(v));
  } else {
    asm("" : "+x"(v.raw));
  }
#elif HWY_ARCH_X86
  if constexpr (std::is_same_v<T, float>) asm("" : "+x"(v));
#endif
  return v;
}

void DequantInt4Row(const uint8_t* packed, int64_t k, int64_t g, const float* scale, const float* zero, float* dst) {
  int64_t c = 0;
#if HWY_TARGET != HWY_SCALAR
  const hn::Full128<int8_t> d8;
  const hn::Full128<int16_t> d16;
  const hn::Full128<int32_t> d32;
  const hn::Full128<float> df;
  const hn::Rebind<int8_t, decltype(d32)> d8q;  // 4 int8 -> 4 int32
  if (g % 32 == 0) {
    for (; c + 32 <= k; c += 32) {
      const float s = scale[c / g], z = zero[c / g];
      const auto vs = hn::Set(df, s), vz = hn::Set(df, z);
      const auto b = hn::LoadU(d8, reinterpret_cast<const int8_t*>(packed + c / 2));
      // low nibble: (b << 4) >> 4 (arithmetic), high: b >> 4, in int16 lanes to stay portable
      const auto b16lo = hn::PromoteTo(d16, hn::LowerHalf(b));
      const auto b16hi = hn::PromoteTo(d16, hn::UpperHalf(hn::Half<decltype(d8)>(), b));
      const auto lo0 = hn::ShiftRight<12>(hn::ShiftLeft<12>(b16lo)), hi0 = hn::ShiftRight<4>(b16lo);
      const auto lo1 = hn::ShiftRight<12>(hn::ShiftLeft<12>(b16hi)), hi1 = hn::ShiftRight<4>(b16hi);
      // column order: lo, hi of byte 0, lo, hi of byte 1, ...
      const hn::Vec<decltype(d16)> seq[4] = {hn::InterleaveLower(d16, lo0, hi0), hn::InterleaveUpper(d16, lo0, hi0),
                                             hn::InterleaveLower(d16, lo1, hi1), hn::InterleaveUpper(d16, lo1, hi1)};
      for (int j = 0; j < 4; ++j) {
        const auto q0 = hn::ConvertTo(df, hn::PromoteTo(d32, hn::LowerHalf(seq[j])));
        const auto q1 = hn::ConvertTo(df, hn::PromoteTo(d32, hn::UpperHalf(hn::Half<decltype(d16)>(), seq[j])));
        hn::StoreU(hn::Add(Unfused(hn::Mul(q0, vs)), vz), df, dst + c + 8 * j);
        hn::StoreU(hn::Add(Unfused(hn::Mul(q1, vs)), vz), df, dst + c + 8 * j + 4);
      }
    }
  }
  (void)d8q;
#endif
  for (; c < k; c += 2) {
    const uint8_t b = packed[c / 2];
    const float s = scale[c / g], z = zero[c / g];
    const int lo = int(int8_t(uint8_t(b << 4))) >> 4, hi = int(int8_t(b)) >> 4;
    const float p0 = Unfused(float(lo) * s), p1 = Unfused(float(hi) * s);
    dst[c] = p0 + z;
    dst[c + 1] = p1 + z;
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace diffq::backend::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace diffq::backend::cpu {

HWY_EXPORT(DequantInt4Row);

void dequant_int4_row(const uint8_t* packed, int64_t k, int64_t g, const float* scale, const float* zero, float* dst) {
  HWY_DYNAMIC_DISPATCH(DequantInt4Row)(packed, k, g, scale, zero, dst);
}

}  // namespace diffq::backend::cpu
#endif
