// Highway (runtime-dispatched) row dequantizers for the types that carry real models: Q8_0, Q4_0,
// Q4_K, Q5_K, Q6_K. Each forms every value with exactly the float operations of the scalar reference
// (quant/gguf/dequant_ref.cpp), so the output is bit-identical; contraction into fused multiply-adds is switched
// off for this file (the AVX2/AVX-512 targets have FMA and GCC would otherwise fuse Mul + Sub).
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "backend/cpu/hwy_config.h"
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backend/cpu/quant/gguf_dequant.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "backend/cpu/quant/gguf_dequant.h"
#include "diffq/dtype.h"

HWY_BEFORE_NAMESPACE();
namespace diffq::backend::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using namespace quant::gguf;

// At most 16 float lanes, so a vector never straddles a 16- or 32-element sub-block.
using DF = hn::CappedTag<float, 16>;
using DI = hn::RebindToSigned<DF>;
using DU8 = hn::Rebind<uint8_t, DF>;
using DI8 = hn::Rebind<int8_t, DF>;

HWY_INLINE hn::Vec<DI> LoadU8(const uint8_t* p) { return hn::BitCast(DI(), hn::PromoteTo(hn::RebindToUnsigned<DF>(), hn::LoadU(DU8(), p))); }

void DequantQ8_0(const void* x, float* y, int64_t n) {
  const DF df;
  const DI di;
  const int64_t N = int64_t(hn::Lanes(df));
  const auto* b = static_cast<const block_q8_0*>(x);
  for (int64_t i = 0; i < n / QK8_0; ++i, y += QK8_0) {
    const auto d = hn::Set(df, f16_to_f32(b[i].d));
    for (int64_t j = 0; j < QK8_0; j += N) {
      const auto q = hn::ConvertTo(df, hn::PromoteTo(di, hn::LoadU(DI8(), b[i].qs + j)));
      hn::StoreU(hn::Mul(q, d), df, y + j);
    }
  }
}

void DequantQ4_0(const void* x, float* y, int64_t n) {
  const DF df;
  const DI di;
  const int64_t N = int64_t(hn::Lanes(df));
  const auto* b = static_cast<const block_q4_0*>(x);
  const auto mask = hn::Set(di, 0xF), eight = hn::Set(di, 8);
  for (int64_t i = 0; i < n / QK4_0; ++i, y += QK4_0) {
    const auto d = hn::Set(df, f16_to_f32(b[i].d));
    for (int64_t j = 0; j < QK4_0 / 2; j += N) {
      const auto q = LoadU8(b[i].qs + j);
      const auto lo = hn::Sub(hn::And(q, mask), eight), hi = hn::Sub(hn::ShiftRight<4>(q), eight);
      hn::StoreU(hn::Mul(d, hn::ConvertTo(df, lo)), df, y + j);
      hn::StoreU(hn::Mul(d, hn::ConvertTo(df, hi)), df, y + j + QK4_0 / 2);
    }
  }
}

void DequantQ4_K(const void* x, float* y, int64_t n) {
  const DF df;
  const DI di;
  const int64_t N = int64_t(hn::Lanes(df));
  const auto* b = static_cast<const block_q4_K*>(x);
  const auto mask = hn::Set(di, 0xF);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float d = f16_to_f32(b[i].d), dmin = f16_to_f32(b[i].dmin);
    const uint8_t* q = b[i].qs;
    for (int j = 0; j < 8; j += 2, q += 32, y += 64) {
      uint8_t sc, m;
      get_scale_min_k4(j, b[i].scales, sc, m);
      const auto d1 = hn::Set(df, d * float(sc)), m1 = hn::Set(df, dmin * float(m));
      get_scale_min_k4(j + 1, b[i].scales, sc, m);
      const auto d2 = hn::Set(df, d * float(sc)), m2 = hn::Set(df, dmin * float(m));
      for (int64_t l = 0; l < 32; l += N) {
        const auto v = LoadU8(q + l);
        hn::StoreU(hn::Sub(hn::Mul(d1, hn::ConvertTo(df, hn::And(v, mask))), m1), df, y + l);
        hn::StoreU(hn::Sub(hn::Mul(d2, hn::ConvertTo(df, hn::ShiftRight<4>(v))), m2), df, y + 32 + l);
      }
    }
  }
}

void DequantQ5_K(const void* x, float* y, int64_t n) {
  const DF df;
  const DI di;
  const int64_t N = int64_t(hn::Lanes(df));
  const auto* b = static_cast<const block_q5_K*>(x);
  const auto mask = hn::Set(di, 0xF), one = hn::Set(di, 1);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float d = f16_to_f32(b[i].d), dmin = f16_to_f32(b[i].dmin);
    const uint8_t* ql = b[i].qs;
    for (int j = 0; j < 8; j += 2, ql += 32, y += 64) {
      uint8_t sc, m;
      get_scale_min_k4(j, b[i].scales, sc, m);
      const auto d1 = hn::Set(df, d * float(sc)), m1 = hn::Set(df, dmin * float(m));
      get_scale_min_k4(j + 1, b[i].scales, sc, m);
      const auto d2 = hn::Set(df, d * float(sc)), m2 = hn::Set(df, dmin * float(m));
      for (int64_t l = 0; l < 32; l += N) {
        const auto v = LoadU8(ql + l), h = LoadU8(b[i].qh + l);
        const auto h1 = hn::ShiftLeft<4>(hn::And(hn::ShiftRightSame(h, j), one));
        const auto h2 = hn::ShiftLeft<4>(hn::And(hn::ShiftRightSame(h, j + 1), one));
        const auto q1 = hn::Or(hn::And(v, mask), h1), q2 = hn::Or(hn::ShiftRight<4>(v), h2);
        hn::StoreU(hn::Sub(hn::Mul(d1, hn::ConvertTo(df, q1)), m1), df, y + l);
        hn::StoreU(hn::Sub(hn::Mul(d2, hn::ConvertTo(df, q2)), m2), df, y + 32 + l);
      }
    }
  }
}

void DequantQ6_K(const void* x, float* y, int64_t n) {
  const DF df;
  const DI di;
  const int64_t N = int64_t(hn::Lanes(df));
  const auto* b = static_cast<const block_q6_K*>(x);
  const auto mask4 = hn::Set(di, 0xF), mask2 = hn::Set(di, 3), off = hn::Set(di, 32);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float d = f16_to_f32(b[i].d);
    const uint8_t* ql = b[i].ql;
    const uint8_t* qh = b[i].qh;
    const int8_t* sc = b[i].scales;
    for (int half = 0; half < 2; ++half, ql += 64, qh += 32, sc += 8, y += 128) {
      for (int64_t l = 0; l < 32; l += N) {
        const int is = int(l / 16);
        const auto a = LoadU8(ql + l), c = LoadU8(ql + l + 32), h = LoadU8(qh + l);
        const auto q1 = hn::Sub(hn::Or(hn::And(a, mask4), hn::ShiftLeft<4>(hn::And(h, mask2))), off);
        const auto q2 = hn::Sub(hn::Or(hn::And(c, mask4), hn::ShiftLeft<4>(hn::And(hn::ShiftRight<2>(h), mask2))), off);
        const auto q3 = hn::Sub(hn::Or(hn::ShiftRight<4>(a), hn::ShiftLeft<4>(hn::And(hn::ShiftRight<4>(h), mask2))), off);
        const auto q4 = hn::Sub(hn::Or(hn::ShiftRight<4>(c), hn::ShiftLeft<4>(hn::ShiftRight<6>(h))), off);
        hn::StoreU(hn::Mul(hn::Set(df, d * float(sc[is + 0])), hn::ConvertTo(df, q1)), df, y + l);
        hn::StoreU(hn::Mul(hn::Set(df, d * float(sc[is + 2])), hn::ConvertTo(df, q2)), df, y + l + 32);
        hn::StoreU(hn::Mul(hn::Set(df, d * float(sc[is + 4])), hn::ConvertTo(df, q3)), df, y + l + 64);
        hn::StoreU(hn::Mul(hn::Set(df, d * float(sc[is + 6])), hn::ConvertTo(df, q4)), df, y + l + 96);
      }
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace diffq::backend::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace diffq::backend::cpu {

using quant::gguf::DequantizeRowFn;
using quant::gguf::GGMLType;

HWY_EXPORT(DequantQ8_0);
HWY_EXPORT(DequantQ4_0);
HWY_EXPORT(DequantQ4_K);
HWY_EXPORT(DequantQ5_K);
HWY_EXPORT(DequantQ6_K);

namespace {
void simd_q8_0(const void* x, float* y, int64_t n) { HWY_DYNAMIC_DISPATCH(DequantQ8_0)(x, y, n); }
void simd_q4_0(const void* x, float* y, int64_t n) { HWY_DYNAMIC_DISPATCH(DequantQ4_0)(x, y, n); }
void simd_q4_K(const void* x, float* y, int64_t n) { HWY_DYNAMIC_DISPATCH(DequantQ4_K)(x, y, n); }
void simd_q5_K(const void* x, float* y, int64_t n) { HWY_DYNAMIC_DISPATCH(DequantQ5_K)(x, y, n); }
void simd_q6_K(const void* x, float* y, int64_t n) { HWY_DYNAMIC_DISPATCH(DequantQ6_K)(x, y, n); }
}  // namespace

DequantizeRowFn gguf_simd_dequantizer(GGMLType t) {
  switch (t) {
    case GGMLType::Q8_0: return simd_q8_0;
    case GGMLType::Q4_0: return simd_q4_0;
    case GGMLType::Q4_K: return simd_q4_K;
    case GGMLType::Q5_K: return simd_q5_K;
    case GGMLType::Q6_K: return simd_q6_K;
    default: return nullptr;
  }
}

DequantizeRowFn gguf_dequantizer(GGMLType t) {
  const DequantizeRowFn simd = gguf_simd_dequantizer(t);
  return simd ? simd : quant::gguf::find_type(t)->dequantize_ref;
}

}  // namespace diffq::backend::cpu
#endif  // HWY_ONCE
