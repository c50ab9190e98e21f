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

// 1 / d for d >= 1 (finite): on AVX-512 the 14-bit reciprocal estimate and one Newton step (~28 bits,
// within an ulp or two of the quotient; the division costs more than the rest of a GELU), elsewhere the
// division.
template <class D, class V>
HWY_INLINE V ReciprocalAtLeastOne(D d, V den) {
#if HWY_TARGET <= HWY_AVX3
  const V r = hn::ApproximateReciprocal(den);
  return hn::MulAdd(r, hn::NegMulAdd(den, r, hn::Set(d, 1.f)), r);  // r + r (1 - den r)
#else
  return hn::Div(hn::Set(d, 1.f), den);
#endif
}

// GELU with the tanh approximation, 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3), computed as
// x / (1 + exp(-2u)) (the same function, no cancellation where tanh(u) -> -1). Where f32's tanh(u) is
// exactly -1 (u < -13 ln(2) / 2) the result is 0 * x as torch's formula gives (-0 for x < 0, NaN for
// x = -inf); NaN stays NaN; +inf stays +inf.
template <class D, class V>
HWY_INLINE V GeluTanh(D d, V x) {
  const V k0 = hn::Set(d, 0.7978845608028654f), k1 = hn::Set(d, 0.044715f);
  const V u = hn::Mul(k0, hn::MulAdd(hn::Mul(k1, hn::Mul(x, x)), x, x));
  const V e = hn::Exp(d, hn::Min(hn::Mul(hn::Set(d, -2.f), u), hn::Set(d, 88.f)));
  const V y = hn::Mul(x, ReciprocalAtLeastOne(d, hn::Add(hn::Set(d, 1.f), e)));
  return hn::IfThenElse(hn::Lt(u, hn::Set(d, -9.010913f)), hn::Mul(x, hn::Zero(d)), y);
}

// f of v's lanes where they are bf16 values (f32 with the low 16 bits zero), by f's table of bf16 values
// (row_kernels.h bf16_unary_table: the unary op's bits): entry bits >> 16 of the 16-bit entries, read as
// 4 bytes at byte offset 2 x entry, the low half kept (the table's last entry pads the read).
template <class D, class V>
HWY_INLINE V Bf16TableLookup(D d, V v, const uint16_t* table) {
  const hn::RebindToUnsigned<D> du;
  const hn::RebindToSigned<D> di;
  const auto off = hn::BitCast(di, hn::ShiftLeft<1>(hn::ShiftRight<16>(hn::BitCast(du, v))));
  return hn::BitCast(d, hn::ShiftLeft<16>(hn::GatherOffset(di, reinterpret_cast<const int32_t*>(table), off)));
}

}  // namespace HWY_NAMESPACE
}  // namespace diffq::backend::cpu
HWY_AFTER_NAMESPACE();

#endif  // DIFFQ_CPU_ACTIVATION_INL_H_
