// Per-target vector activations shared by the unary op (unary.cpp) and the kernels that fuse one into
// their epilogue (norm.cpp's group_norm_silu): one definition, so a fused activation gives the op's bits.
// Highway multi-target inline header, as simd-inl.h.
#if defined(DIFFQ_CPU_ACTIVATION_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef DIFFQ_CPU_ACTIVATION_INL_H_
#undef DIFFQ_CPU_ACTIVATION_INL_H_
#else
#define DIFFQ_CPU_ACTIVATION_INL_H_
#endif

#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>

HWY_BEFORE_NAMESPACE();
namespace diffq::backend::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// exp with torch's edge behaviour: overflow -> inf, NaN -> NaN (Highway's Exp is valid to +104).
template <class D, class V>
HWY_INLINE V ExpSafe(D d, V x) {
  const V e = hn::Exp(d, hn::Min(x, hn::Set(d, 100.f)));
  return hn::IfThenElse(hn::IsNaN(x), x, e);
}

// 1 / (1 + exp(-x)); the exponent is clamped where the result is 0 or 1 to float precision anyway.
template <class D, class V>
HWY_INLINE V Sigmoid(D d, V x) {
  const V one = hn::Set(d, 1.f);
  const V e = hn::Exp(d, hn::Min(hn::Neg(x), hn::Set(d, 88.f)));
  return hn::Div(one, hn::Add(one, e));
}

// silu(x) = x * sigmoid(x).
template <class D, class V>
HWY_INLINE V Silu(D d, V x) {
  return hn::Mul(x, Sigmoid(d, x));
}

}  // namespace HWY_NAMESPACE
}  // namespace diffq::backend::cpu
HWY_AFTER_NAMESPACE();

#endif  // DIFFQ_CPU_ACTIVATION_INL_H_
