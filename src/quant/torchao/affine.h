// torchao's affine quantization primitives (quant_primitives.py, configs version 2) for one block of
// values, with PyTorch's CPU dtype semantics reproduced so results are bit-exact: every tensor op
// rounds its result to the op's dtype (a bf16 tensor op computes in f32 and rounds once), dtype
// promotion picks the wider float type, torch.round is round-half-to-even.
#pragma once

#include <cmath>
#include <cstdint>

#include "diffq/dtype.h"

namespace diffq::quant::torchao {

enum class MappingType { Symmetric, SymmetricNoClippingErr, Asymmetric };

// torch.promote_types for the float dtypes used here (f32, bf16, f16).
inline DType promote_float(DType a, DType b) {
  if (a == b) return a;
  return DType::f32;
}

// Integer range of torch.int1 .. torch.int8 (signed): [-2^(b-1), 2^(b-1) - 1].
inline int32_t qmin_bits(int bits) { return -(1 << (bits - 1)); }
inline int32_t qmax_bits(int bits) { return (1 << (bits - 1)) - 1; }

struct AffineParams {
  float scale = 0;  // already in the scale dtype (exactly representable there)
  int32_t zero_point = 0;
};

// choose_qparams_affine for one block with amin `mn` and amax `mx` (exact, of values of dtype `cd`),
// computing in `cd` (the input dtype) as torch does; `eps` clamps the scale from below.
AffineParams choose_qparams(float mn, float mx, MappingType mapping, int32_t qmin, int32_t qmax,
                            float eps, DType cd);

// quantize_affine of one value: clamp(round(x * (1 / scale)) + zero_point, qmin, qmax). `recip` is
// 1/scale computed in the scale dtype; `pd` is promote(x dtype, scale dtype).
inline int32_t quantize_one(float x, float recip, int32_t zero_point, int32_t qmin, int32_t qmax, DType pd) {
  const float r = std::nearbyint(round_through(pd, x * recip));
  float v = round_through(pd, r + float(zero_point));
  v = std::min(std::max(v, float(qmin)), float(qmax));
  if (std::isnan(v)) return 0;
  return int32_t(v);
}

// 1 / scale as torch computes `1.0 / scale` for a tensor of dtype sdt.
inline float reciprocal_in(DType sdt, float scale) { return round_through(sdt, 1.0f / scale); }

// dequantize_affine of one value to `out`: (q - zero_point) * scale, the product in
// promote(out, scale dtype), then cast to out.
inline float dequantize_one(int32_t q, int32_t zero_point, float scale, DType sdt, DType out) {
  const float d = round_through(out, float(q - zero_point));
  return round_through(out, round_through(promote_float(out, sdt), d * scale));
}

// float8: _choose_scale_float8 for a block with amax `amax` in the hp dtype: amax / fp8_max, rounded to
// the hp dtype (the division is a tensor op in that dtype), returned as f32.
inline float float8_scale(float amax, float fp8_max, DType hp) { return round_through(hp, amax / fp8_max); }

// _quantize_affine_float8 of one value: clamp(x_f32 / scale, -max, max) cast to the fp8 dtype.
uint8_t float8_quantize_one(float x, float scale, DType f8);

float float8_max(DType f8);  // 448 for e4m3fn, 57344 for e5m2

}  // namespace diffq::quant::torchao
