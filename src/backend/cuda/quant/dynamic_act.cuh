// The activation side of torchao's dynamically quantized linears, value by value as the CPU computes them:
// int8 (Int8DynamicActivationInt8WeightConfig; src/quant/torchao/int8_dynamic_linear.cpp, backend/cpu's int8
// activation quantizer and epilogue): the symmetric scale of a row (or the tensor), the code of one value,
// the output of one int32 dot product; float8 (Float8DynamicActivationFloat8WeightConfig, e4m3fn;
// float8_weight.cpp): the scale of a row's absmax and one value quantized and dequantized. Callable from the host: tests/cuda/test_cuda_block_values.cpp
// checks them against the CPU's functions.
#pragma once

#include <cfloat>
#include <cmath>

#include "backend/cuda/quant/block_values.cuh"
#include "core/float8_e4m3.h"

namespace diffq::backend::cuda::blockq {

// std::min / std::max exactly (a NaN in the second place loses).
DIFFQ_HOST_DEVICE float std_min(float a, float b) { return b < a ? b : a; }
DIFFQ_HOST_DEVICE float std_max(float a, float b) { return a < b ? b : a; }

DIFFQ_HOST_DEVICE float div(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

// choose_qparams(mn, mx, Symmetric, -128, 127, FLT_EPSILON, cd).scale.
DIFFQ_HOST_DEVICE float int8_symmetric_scale(float mn, float mx, DType cd) {
  const float min_neg = std_min(mn, 0.0f), max_pos = std_max(mx, 0.0f);
  const float m = std_max(-min_neg, max_pos);
  return round_to(cd, std_max(round_to(cd, div(m, 127.5f)), FLT_EPSILON));
}

// clamp(round_half_even(x * recip), -128, 127), NaN -> 0 (recip = 1 / scale in f32).
DIFFQ_HOST_DEVICE int8_t int8_code(float x, float recip) {
#ifdef __CUDA_ARCH__
  float v = rintf(mul(x, recip));
#else
  float v = std::nearbyint(mul(x, recip));
#endif
  v = std_min(std_max(v, -128.0f), 127.0f);
  return v != v ? int8_t(0) : int8_t(v);
}

// One output of the int8 GEMM's epilogue: round(out, c * x_scale) * w_scale (+ bias), in f32 (the caller
// rounds it to `out` when storing).
DIFFQ_HOST_DEVICE float int8dq_output(int32_t c, float x_scale, float w_scale, bool has_bias, float bias, DType out) {
  float v = mul(round_to(out, mul(float(c), x_scale)), w_scale);
  if (has_bias) v = add(v, bias);
  return v;
}

// f32 -> float8_e4m3fn code: the host's own definition (core/float8_e4m3.h), compiled for the device.
DIFFQ_HOST_DEVICE uint8_t f32_to_e4m3fn(float f) { return core::f32_to_e4m3fn_bits(f); }

// max(|a|, |b|) with a NaN winning (amax_abs stops at the first NaN).
DIFFQ_HOST_DEVICE float amax_combine(float a, float b) { return a != a ? a : b != b ? b : std_max(a, b); }

// float8_scale(amax, 448, hp): amax / 448 rounded through the activation dtype.
DIFFQ_HOST_DEVICE float e4m3_scale(float amax, DType hp) { return round_to(hp, div(amax, 448.0f)); }

// x quantized to float8_e4m3fn with `scale`: x / scale clamped to +-448 (NaN kept), as its code.
DIFFQ_HOST_DEVICE uint8_t e4m3_code(float x, float scale) {
  float v = div(x, scale);
  if (v == v) v = std_min(std_max(v, -448.0f), 448.0f);
  return f32_to_e4m3fn(v);
}

// x quantized to float8_e4m3fn with `scale` and dequantized: f8[code] * scale.
DIFFQ_HOST_DEVICE float e4m3_fake_quant(float x, float scale, const float* f8) { return mul(f8[e4m3_code(x, scale)], scale); }

// An output of the float8 GEMM on codes (acc = sum of f8[x code] * f8[w code], f32) scaled back:
// acc * x_scale * w_scale (+ bias), before the rounding to the output dtype. The dequantized GEMM
// computes sum((f8[x] * x_scale) * (f8[w] * w_scale)): the same value up to rounding and summation order.
DIFFQ_HOST_DEVICE float fp8dq_output(float acc, float x_scale, float w_scale, bool has_bias, float bias) {
  float v = mul(mul(acc, x_scale), w_scale);
  if (has_bias) v = add(v, bias);
  return v;
}

}  // namespace diffq::backend::cuda::blockq
