// The rotary embedding of one row on interleaved pairs, in f32 (rope.cpp: rope; norm_rope.cpp: rms_norm_rope):
// y[2k] = x[2k] cs[2k] - x[2k+1] sn[2k], y[2k+1] = x[2k+1] cs[2k+1] + x[2k] sn[2k+1] (Highway multi-target inline
// header: include it after simd-inl.h inside a file compiled once per target via foreach_target.h).
#if defined(DIFFQ_CPU_ROPE_ROW_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef DIFFQ_CPU_ROPE_ROW_INL_H_
#undef DIFFQ_CPU_ROPE_ROW_INL_H_
#else
#define DIFFQ_CPU_ROPE_ROW_INL_H_
#endif

#include <hwy/highway.h>

#include "backend/cpu/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace diffq::backend::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

inline void RopeRow(const float* x, const float* cs, const float* sn, float* y, int64_t n) {
#if HWY_TARGET == HWY_SCALAR  // one lane: no pair shuffles
  for (int64_t i = 0; i < n; i += 2) {
    const float a = x[i], b = x[i + 1];
    y[i] = a * cs[i] - b * sn[i];
    y[i + 1] = b * cs[i + 1] + a * sn[i + 1];
  }
#else
  const hn::ScalableTag<float> d;
  const int64_t N = int64_t(hn::Lanes(d));
  auto one = [&](int64_t i, size_t len) {
    const bool full = len == size_t(N);
    const auto v = full ? hn::LoadU(d, x + i) : LoadTail(d, x + i, len);
    const auto c = full ? hn::LoadU(d, cs + i) : LoadTail(d, cs + i, len);
    const auto s = full ? hn::LoadU(d, sn + i) : LoadTail(d, sn + i, len);
    const auto sw = hn::Shuffle2301(v);                 // (x1, x0, x3, x2, ...)
    const auto rot = hn::OddEven(sw, hn::Neg(sw));      // (-x1, x0, -x3, x2, ...)
    const auto r = hn::MulAdd(v, c, hn::Mul(rot, s));
    if (full) hn::StoreU(r, d, y + i);
    else StoreTail(r, d, y + i, len);
  };
  int64_t i = 0;
  for (; i + N <= n; i += N) one(i, size_t(N));
  if (i < n) one(i, size_t(n - i));
#endif
}

// RopeRow of x with row p's tables into the output row at y (dtype yt), rounded once to yt (f32 written directly,
// the rest by StoreRowAs). res: D floats of scratch.
inline void RopeRowTo(const float* x, const float* cs, const float* sn, uint8_t* y, DType yt, int64_t D, float* res) {
  float* out = yt == DType::f32 ? reinterpret_cast<float*>(y) : res;
  RopeRow(x, cs, sn, out, D);
  if (yt != DType::f32) StoreRowAs(res, y, yt, D);
}

}  // namespace HWY_NAMESPACE
}  // namespace diffq::backend::cpu
HWY_AFTER_NAMESPACE();

#endif  // DIFFQ_CPU_ROPE_ROW_INL_H_
