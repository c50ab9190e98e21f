// Per-target SIMD helpers shared by the CPU kernels (Highway multi-target inline header: include it
// after <hwy/highway.h> inside a file compiled once per target via foreach_target.h).
#if defined(DIFFQ_CPU_SIMD_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef DIFFQ_CPU_SIMD_INL_H_
#undef DIFFQ_CPU_SIMD_INL_H_
#else
#define DIFFQ_CPU_SIMD_INL_H_
#endif

#include <hwy/highway.h>

#include <cstring>

#include "backend/cpu/common.h"
#include "diffq/dtype.h"

HWY_BEFORE_NAMESPACE();
namespace diffq::backend::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

inline constexpr size_t kMaxFloatLanes = 64;  // enough for any vector length Highway supports

// Loads n (< Lanes) floats, zero-filling the rest, without touching memory past p + n.
template <class D>
HWY_INLINE hn::Vec<D> LoadTail(D d, const float* p, size_t n) {
  HWY_ALIGN float buf[kMaxFloatLanes] = {};
  std::memcpy(buf, p, n * sizeof(float));
  return hn::Load(d, buf);
}

template <class D>
HWY_INLINE void StoreTail(hn::Vec<D> v, D d, float* p, size_t n) {
  HWY_ALIGN float buf[kMaxFloatLanes];
  hn::Store(v, d, buf);
  std::memcpy(p, buf, n * sizeof(float));
}

// Each lane rounded to the nearest bf16 (ties to even), as a float: f32_to_bf16 then widened, NaN -> the
// canonical quiet NaN (0x7fc0).
template <class D>
HWY_INLINE hn::Vec<D> RoundToBf16(D d, hn::Vec<D> v) {
  const hn::RebindToUnsigned<D> du;
  const auto u = hn::BitCast(du, v);
  const auto r = hn::And(hn::Add(hn::Add(u, hn::Set(du, 0x7fffu)), hn::And(hn::ShiftRight<16>(u), hn::Set(du, 1u))),
                         hn::Set(du, 0xffff0000u));
  return hn::BitCast(d, hn::IfThenElse(hn::RebindMask(du, hn::IsNaN(v)), hn::Set(du, 0x7fc00000u), r));
}

// Lanes of bf16 bits at p widened to f32 (exact).
template <class D>
HWY_INLINE hn::Vec<D> LoadBf16(D d, const uint16_t* p) {
  const hn::RebindToUnsigned<D> du;
  const hn::Rebind<uint16_t, D> du16;
  return hn::BitCast(d, hn::ShiftLeft<16>(hn::PromoteTo(du, hn::LoadU(du16, p))));
}

// Lanes already holding bf16 values (RoundToBf16's results) stored as their bf16 bits at p.
template <class D>
HWY_INLINE void StoreRoundedBf16(D d, hn::Vec<D> r, uint16_t* p) {
  const hn::RebindToUnsigned<D> du;
  const hn::RebindToSigned<D> di;
  const hn::Rebind<uint16_t, D> du16;
  hn::StoreU(hn::DemoteTo(du16, hn::BitCast(di, hn::ShiftRight<16>(hn::BitCast(du, r)))), du16, p);
}

// v rounded to bf16 (RoundToBf16: torch's ties-to-even, NaN -> 0x7fc0) and stored as bits at p.
template <class D>
HWY_INLINE void StoreBf16(D d, hn::Vec<D> v, uint16_t* p) {
  StoreRoundedBf16(d, RoundToBf16(d, v), p);
}

// n bf16 bits at x widened to f32 at y (exact), and n floats at x stored as bf16 bits at y (StoreBf16's rounding:
// f32_to_bf16's): the row conversions of convert.cpp (load_f32 / store_f32), inlined where a kernel converts
// short rows itself.
HWY_INLINE void Bf16RowToF32(const uint16_t* x, float* y, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t N = int64_t(hn::Lanes(d));
  int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(LoadBf16(d, x + i), d, y + i);
  for (; i < n; ++i) y[i] = bf16_to_f32(x[i]);
}
HWY_INLINE void F32RowToBf16(const float* x, uint16_t* y, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t N = int64_t(hn::Lanes(d));
  int64_t i = 0;
  for (; i + N <= n; i += N) StoreBf16(d, hn::LoadU(d, x + i), y + i);
  for (; i < n; ++i) y[i] = f32_to_bf16(x[i]);
}

// A row of n values of dtype t at src (element stride `stride`) as f32: src itself where it already is unit-stride
// f32, else widened into buf (bf16 rows of unit stride in the target, the rest through load_f32). The row kernels'
// (norms, rope) load; StoreRowAs is their store: bf16 in the target, the rest through store_f32.
HWY_INLINE const float* RowAsF32(const uint8_t* src, DType t, int64_t stride, float* buf, int64_t n) {
  if (t == DType::f32 && stride == 1) return reinterpret_cast<const float*>(src);
  if (t == DType::bf16 && stride == 1)
    Bf16RowToF32(reinterpret_cast<const uint16_t*>(src), buf, n);
  else
    load_f32(src, t, stride, buf, n);
  return buf;
}
HWY_INLINE void StoreRowAs(const float* v, uint8_t* dst, DType t, int64_t n) {
  if (t == DType::bf16)
    F32RowToBf16(v, reinterpret_cast<uint16_t*>(dst), n);
  else
    store_f32(v, dst, t, n);
}

// y[i] = f(x[i]) for a vector functor f(d, v); x may equal y.
template <class F>
HWY_INLINE void MapF32(const float* x, float* y, int64_t n, F f) {
  const hn::ScalableTag<float> d;
  const int64_t N = int64_t(hn::Lanes(d));
  int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(f(d, hn::LoadU(d, x + i)), d, y + i);
  if (i < n) StoreTail(f(d, LoadTail(d, x + i, size_t(n - i))), d, y + i, size_t(n - i));
}

// Horizontal sum / max of all lanes.
template <class D>
HWY_INLINE float SumLanes(D d, hn::Vec<D> v) {
  return hn::GetLane(hn::SumOfLanes(d, v));
}
template <class D>
HWY_INLINE float MaxLanes(D d, hn::Vec<D> v) {
  return hn::GetLane(hn::MaxOfLanes(d, v));
}

}  // namespace HWY_NAMESPACE
}  // namespace diffq::backend::cpu
HWY_AFTER_NAMESPACE();

#endif  // include guard toggle
