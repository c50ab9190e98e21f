// Highway row kernels of int8 activation quantization (see int8_act_quant.h) and their scalar
// references. Every vector lane does the reference's float operations (one f32 product, round half to
// even, clamp), so the codes are bit-identical.
#include "backend/cpu/hwy_config.h"
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backend/cpu/int8_act_quant.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/int8_act_quant.h"
#include "backend/cpu/int8_gemm.h"

#ifndef DIFFQ_INT8_ACT_QUANT_ONCE
#define DIFFQ_INT8_ACT_QUANT_ONCE
namespace diffq::backend::cpu::int8_act_detail {

inline float load_one(const void* x, DType src, int64_t i) {
  return src == DType::bf16 ? bf16_to_f32(static_cast<const uint16_t*>(x)[i]) : static_cast<const float*>(x)[i];
}

inline int8_t quantize_one(float x, float recip) {
  float v = std::nearbyint(x * recip);
  v = std::min(std::max(v, -128.0f), 127.0f);
  return std::isnan(v) ? int8_t(0) : int8_t(v);
}

}  // namespace diffq::backend::cpu::int8_act_detail
#endif

HWY_BEFORE_NAMESPACE();
namespace diffq::backend::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using namespace int8_act_detail;

template <class D>
HWY_INLINE hn::Vec<D> LoadF32(D df, const void* x, DType src, int64_t i) {
  if (src == DType::bf16) {
    const hn::RebindToUnsigned<D> du;
    const hn::Rebind<uint16_t, D> du16;
    const auto h = hn::PromoteTo(du, hn::LoadU(du16, static_cast<const uint16_t*>(x) + i));
    return hn::BitCast(df, hn::ShiftLeft<16>(h));
  }
  return hn::LoadU(df, static_cast<const float*>(x) + i);
}

float Int8RowAbsMax(const void* x, DType src, int64_t k) {
  int64_t c = 0;
  if (src == DType::bf16) {  // on the bits: |x| orders as the bits without the sign; NaNs lie above inf's
    const hn::ScalableTag<uint16_t> du;
    const int64_t L = int64_t(hn::Lanes(du));
    const auto* p = static_cast<const uint16_t*>(x);
    const auto magnitude = hn::Set(du, 0x7fff), inf = hn::Set(du, 0x7f80);
    auto acc = hn::Zero(du);
    for (; c + L <= k; c += L) {
      const auto u = hn::And(hn::LoadU(du, p + c), magnitude);
      acc = hn::Max(acc, hn::IfThenZeroElse(hn::Gt(u, inf), u));
    }
    uint16_t m = hn::GetLane(hn::MaxOfLanes(du, acc));
    for (; c < k; ++c) {
      const uint16_t u = p[c] & 0x7fff;
      if (u <= 0x7f80) m = std::max(m, u);
    }
    return bf16_to_f32(m);
  }
  const hn::ScalableTag<float> df;
  const int64_t L = int64_t(hn::Lanes(df));
  const auto* p = static_cast<const float*>(x);
  auto acc = hn::Zero(df);
  for (; c + L <= k; c += L) {
    const auto v = hn::Abs(hn::LoadU(df, p + c));
    acc = hn::IfThenElse(hn::Gt(v, acc), v, acc);  // NaN compares false: never wins
  }
  HWY_ALIGN float lanes[hn::MaxLanes(df)];
  hn::Store(acc, df, lanes);
  float m = 0.0f;
  for (int64_t l = 0; l < L; ++l) m = std::max(m, lanes[l]);
  for (; c < k; ++c)
    if (std::fabs(p[c]) > m) m = std::fabs(p[c]);
  return m;
}

// Codes of x[0, k) into q (k entries) as T: int16 (a row for the tile's packed strips) or int8 (the
// row-major A that oneDNN's int8 matmul reads).
template <class T>
void QuantizeRowAs(const void* x, DType src, int64_t k, float recip, T* q) {
  const hn::ScalableTag<float> df;
  const hn::RebindToSigned<decltype(df)> di;
  const hn::Rebind<T, decltype(df)> dq;
  const int64_t L = int64_t(hn::Lanes(df));
  const auto r = hn::Set(df, recip), lo = hn::Set(df, -128.0f), hi = hn::Set(df, 127.0f);
  int64_t c = 0;
  for (; c + L <= k; c += L) {
    auto v = hn::Round(hn::Mul(LoadF32(df, x, src, c), r));
    v = hn::IfThenZeroElse(hn::IsNaN(v), v);
    v = hn::Min(hn::Max(v, lo), hi);
    hn::StoreU(hn::DemoteTo(dq, hn::ConvertTo(di, v)), dq, q + c);
  }
  for (; c < k; ++c) q[c] = quantize_one(load_one(x, src, c), recip);
}

void Int8QuantizeRow(const void* x, DType src, int64_t k, float recip, int16_t* q) {
  QuantizeRowAs(x, src, k, recip, q);
}
void Int8QuantizeRowS8(const void* x, DType src, int64_t k, float recip, int8_t* q) {
  QuantizeRowAs(x, src, k, recip, q);
}

}  // namespace HWY_NAMESPACE
}  // namespace diffq::backend::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace diffq::backend::cpu {

HWY_EXPORT(Int8RowAbsMax);
HWY_EXPORT(Int8QuantizeRow);
HWY_EXPORT(Int8QuantizeRowS8);

using namespace int8_act_detail;

float int8_row_abs_max(const void* x, DType src, int64_t k) { return HWY_DYNAMIC_DISPATCH(Int8RowAbsMax)(x, src, k); }

float int8_row_abs_max_reference(const void* x, DType src, int64_t k) {
  float a = INFINITY, b = -INFINITY;  // the row's min and max, as torch's aminmax (NaN never wins)
  for (int64_t c = 0; c < k; ++c) {
    const float v = load_one(x, src, c);
    a = std::min(a, v), b = std::max(b, v);
  }
  return std::max(-std::min(a, 0.0f), std::max(b, 0.0f));
}

void int8_quantize_row_packed(const void* x, DType src, int64_t k, float recip, int16_t* strip, int64_t r) {
  thread_local std::vector<int16_t> row;
  row.resize(size_t(k));
  if (x)
    HWY_DYNAMIC_DISPATCH(Int8QuantizeRow)(x, src, k, recip, row.data());
  else
    std::fill(row.begin(), row.end(), int16_t(0));
  pack_a_row_s16(row.data(), k, strip, r);
}

void int8_quantize_row(const void* x, DType src, int64_t k, float recip, int8_t* q) {
  HWY_DYNAMIC_DISPATCH(Int8QuantizeRowS8)(x, src, k, recip, q);
}

void int8_quantize_row_reference(const void* x, DType src, int64_t k, float recip, int8_t* q) {
  for (int64_t c = 0; c < k; ++c) q[c] = quantize_one(load_one(x, src, c), recip);
}

}  // namespace diffq::backend::cpu
#endif
