// bitsandbytes LLM.int8() (quant/bnb/bnb_int8.h) value by value, as the CPU's kernel computes it
// (backend/cpu/quant/bnb_int8_linear.cpp and bnb::int8_vectorwise_quant): an activation's float16 value and
// whether it is an outlier, a row's quantization multiplier and one code, one output of the int32 product's
// dequantization (int8_mm_dequant + bias, rounded to x's dtype), one outlier column's dequantized weight and
// the outlier sum folded in; and the dequantize_fp mode's weight value. The CUDA kernels (bnb_int8_kernels.cu)
// only map indices onto these; callable from the host: tests/cuda/test_cuda_block_values.cpp assembles the
// whole linear from them and compares it bit for bit with the CPU's.
#pragma once

#include <cmath>
#include <cstdint>

#include "backend/cuda/quant/block_values.cuh"

namespace diffq::backend::cuda::blockq {

inline constexpr float kBnbInv127 = float(7.874015718698502e-3);  // quant::bnb::kInv127
inline constexpr float kBnbInv127Sq = float(6.200124e-05);        // quant::bnb::kInv127Sq

DIFFQ_HOST_DEVICE float bnb8_div(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

// A.to(float16) as f32: x's value (of its own dtype, widened exactly) rounded to float16.
DIFFQ_HOST_DEVICE float bnb8_half(float x) { return round_to(DType::f16, x); }

// |a16| >= thr16 (both float16 values; thr16 = the threshold rounded to float16); only when threshold > 0.
DIFFQ_HOST_DEVICE bool bnb8_is_outlier(float a16, float thr16) { return fabsf(a16) >= thr16; }

// What a value contributes to its row's absmax: |a16|, 0 for an outlier.
DIFFQ_HOST_DEVICE float bnb8_abs(float a16, bool outlier) { return outlier ? 0.0f : fabsf(a16); }

// std::max(am, v): the left fold of the row's absmax (a NaN value never wins over the running maximum).
DIFFQ_HOST_DEVICE float bnb8_max(float am, float v) { return am < v ? v : am; }

// 127.0 / absmax as torch computes it: absmax.reciprocal() * 127.
DIFFQ_HOST_DEVICE float bnb8_mult(float absmax) { return mul(bnb8_div(1.0f, absmax), 127.0f); }

// The code of a16 (0 for an outlier): round half to even of a16 * mult, NaN (0 * inf of an all-zero row)
// to 0, then int8 (in range: |a16| <= absmax).
DIFFQ_HOST_DEVICE int8_t bnb8_code(float a16, bool outlier, float mult) {
  const float p = mul(outlier ? 0.0f : a16, mult);
  if (p != p) return 0;
#ifdef __CUDA_ARCH__
  return int8_t(int32_t(rintf(p)));
#else
  return int8_t(int32_t(std::nearbyint(p)));
#endif
}

// The int32 product's output: (c * (absmax_x * SCB)) * 1/127^2 (+ the bias rounded to x's dtype), rounded to
// x's dtype `dt`.
DIFFQ_HOST_DEVICE float bnb8_main(int32_t c, float absmax_x, float scb, bool has_bias, float bias, DType dt) {
  float v = mul(float(c), mul(absmax_x, scb));
  v = mul(v, kBnbInv127Sq);
  if (has_bias) v = add(v, round_to(dt, bias));
  return round_to(dt, v);
}

// An outlier column's weight as the outlier GEMM reads it: int8_vectorwise_dequant (q * SCB * 1/127) rounded
// to x's dtype.
DIFFQ_HOST_DEVICE float bnb8_outlier_weight(int8_t q, float scb, DType dt) {
  return round_to(dt, mul(mul(float(q), scb), kBnbInv127));
}

// One term of the outlier sum (x's own value times the rounded weight), added in ascending column order.
DIFFQ_HOST_DEVICE float bnb8_outlier_term(float s, float x, float w) { return add(s, mul(x, w)); }

// main + the outlier sum, rounded to x's dtype (only when the input has outlier columns).
DIFFQ_HOST_DEVICE float bnb8_with_outliers(float main, float s, DType dt) { return round_to(dt, add(main, s)); }

// The dequantize_fp mode's weight (Bnb8bitWeight::tile_linear_plan): q * (SCB * 1/127) rounded to x's dtype.
DIFFQ_HOST_DEVICE float bnb8_fp_weight(int8_t q, float scb, DType dt) {
  return round_to(dt, mul(float(q), mul(scb, kBnbInv127)));
}

}  // namespace diffq::backend::cuda::blockq
