// The row statistics and normalisation of the row norms (norm.cpp: layer_norm, rms_norm; norm_rope.cpp:
// rms_norm_rope), one definition for every kernel that normalises rows (Highway multi-target inline header:
// include it after simd-inl.h inside a file compiled once per target via foreach_target.h).
#if defined(DIFFQ_CPU_NORM_ROW_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef DIFFQ_CPU_NORM_ROW_INL_H_
#undef DIFFQ_CPU_NORM_ROW_INL_H_
#else
#define DIFFQ_CPU_NORM_ROW_INL_H_
#endif

#include <hwy/highway.h>

#include "backend/cpu/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace diffq::backend::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// sum(x) and sum((x - shift)^2) of n floats.
inline void SumAndSquares(const float* x, int64_t n, float shift, double* sum, double* sq) {
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
  double s = SumLanes(d, hn::Add(a0, a1)), q = SumLanes(d, hn::Add(q0, q1));
  for (; i < n; ++i) {
    s += x[i];
    q += double(x[i] - shift) * double(x[i] - shift);
  }
  *sum = s;
  *sq = q;
}

// y = (x - mean) * rstd * w + b, with w / b optional (nullptr).
inline void NormalizeRow(const float* x, float* y, int64_t n, float mean, float rstd, const float* w,
                  const float* b) {
  const hn::ScalableTag<float> d;
  const int64_t N = int64_t(hn::Lanes(d));
  const auto vm = hn::Set(d, mean), vr = hn::Set(d, rstd);
  auto one = [&](int64_t i, size_t len) {
    auto v = len == size_t(N) ? hn::LoadU(d, x + i) : LoadTail(d, x + i, len);
    v = hn::Mul(hn::Sub(v, vm), vr);
    if (w) v = hn::Mul(v, len == size_t(N) ? hn::LoadU(d, w + i) : LoadTail(d, w + i, len));
    if (b) v = hn::Add(v, len == size_t(N) ? hn::LoadU(d, b + i) : LoadTail(d, b + i, len));
    if (len == size_t(N)) hn::StoreU(v, d, y + i);
    else StoreTail(v, d, y + i, len);
  };
  int64_t i = 0;
  for (; i + N <= n; i += N) one(i, size_t(N));
  if (i < n) one(i, size_t(n - i));
}

}  // namespace HWY_NAMESPACE
}  // namespace diffq::backend::cpu
HWY_AFTER_NAMESPACE();

#endif  // DIFFQ_CPU_NORM_ROW_INL_H_
