// Nunchaku Lite (quant/nunchaku/nunchaku.h) value by value, as the CPU computes it:
//  * SVDQuant W4A4 (SvdqW4A4Weight::quantize_activations and backend/cpu/quant/nunchaku_linear.cpp): one
//    token's group of 64 activations smoothed (x / smooth) and quantized to int4 codes with its scale
//    (amax * (1/7), codes = clamp(round_half_even(xs * (1 / scale)), -8, 7), NaN -> 0); the int4 x int4
//    group sums folded into the output in group order ((float(dot) * ascale) * wscale); the low-rank branch
//    (sums in index order) and the bias (read through the packed layout's permutation, svdq_scale_index);
//  * AWQ W4A16 (AwqW4A16Weight::dequantize): one weight, code * wscale + wzero in f32 (awq_code's nibble map).
// The CUDA kernels (nunchaku_kernels.cu) only map indices onto these; callable from the host:
// tests/cuda/test_cuda_block_values.cpp checks them against the reference and the CPU's linear bit for bit.
#pragma once

#include <cmath>
#include <cstdint>

#include "backend/cuda/quant/block_values.cuh"

namespace diffq::backend::cuda::blockq {

inline constexpr int64_t kSvdqGroup = 64;

DIFFQ_HOST_DEVICE float svdq_div(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

// quant::nunchaku::svdq_scale_index for a vector (groups = 1): where output j's bias sits in the bias tensor.
DIFFQ_HOST_DEVICE int64_t svdq_vector_index(int64_t j, bool packed) {
  if (!packed) return j;
  const int64_t nb = j / 128, a = j % 128 / 16, b = j % 16 / 8, c = j % 8 / 2, d = j % 2;
  return (nb * 8 + a) * 16 + c * 4 + b * 2 + d;
}

// One token's group g of 64 inputs: x (row-major [*, K], dtype xdt: f32 / bf16 / f16, row t) divided by
// smooth (f32 [K]), its scale written to *ascale and its codes to q[0..64) (q points at the group's first
// code). The CPU's order: xs = x / smooth, amax = left fold of std::max over |xs|, scale = amax * (1/7),
// recip = 1 / scale (0 for a zero scale), code = clamp(nearbyint(xs * recip), -8, 7), NaN -> 0.
DIFFQ_HOST_DEVICE void svdq_quantize_group(const void* x, DType xdt, const float* smooth, int64_t K, int64_t t,
                                           int64_t g, int8_t* q, float* ascale) {
  const int64_t k0 = g * kSvdqGroup;
  float amax = 0.0f;
  for (int64_t j = k0; j < k0 + kSvdqGroup; ++j) {
    const float v = fabsf(svdq_div(load_value(x, xdt, t * K + j), smooth[j]));
    amax = amax < v ? v : amax;
  }
  const float s = mul(amax, 1.0f / 7.0f);
  *ascale = s;
  const float rs = s == 0.0f ? 0.0f : svdq_div(1.0f, s);
  for (int64_t j = k0; j < k0 + kSvdqGroup; ++j) {
    const float xs = svdq_div(load_value(x, xdt, t * K + j), smooth[j]);
#ifdef __CUDA_ARCH__
    const float v = rintf(mul(xs, rs));
#else
    const float v = std::nearbyint(mul(xs, rs));
#endif
    q[j - k0] = v != v ? int8_t(0) : int8_t(v < -8.0f ? -8.0f : 7.0f < v ? 7.0f : v);
  }
}

// The running output after group g: acc + (float(dot) * ascale) * wscale (dot: the exact int32 sum of the
// group's 64 code products).
DIFFQ_HOST_DEVICE float svdq_group_term(float acc, int32_t dot, float ascale, float wscale) {
  return add(acc, mul(mul(float(dot), ascale), wscale));
}

// One term of a low-rank sum in index order: s + a * b (la = x . down[r], lr = la . up[n]).
DIFFQ_HOST_DEVICE float svdq_dot_term(float s, float a, float b) { return add(s, mul(a, b)); }

// The output before its rounding to x's dtype: (int4 part + low-rank part) + bias.
DIFFQ_HOST_DEVICE float svdq_output(float main, float lowrank, float bias) { return add(add(main, lowrank), bias); }

// quant::nunchaku::awq_code: the unsigned code (0..15) of output nn, input kk in qweight int32 [N/4, K/2].
DIFFQ_HOST_DEVICE int awq_code(const int32_t* qweight, int64_t K, int64_t nn, int64_t kk) {
  const int64_t g = kk / 64, c = kk % 64;
  const int64_t p = (c / 32) * 4 + (c % 8) / 2, nib = (c % 32) / 8 + 4 * (c % 2);
  const uint32_t w = uint32_t(qweight[(nn / 4) * (K / 2) + g * 32 + (nn % 4) * 8 + p]);
  return int((w >> (4 * nib)) & 0xF);
}

// AWQ W4A16 weight (n, k) in f32: code * wscale + wzero (wscales / wzeros f32 [K/64, N]).
DIFFQ_HOST_DEVICE float awq_value(const int32_t* qweight, const float* wscales, const float* wzeros, int64_t N,
                                  int64_t K, int64_t n, int64_t k) {
  const int64_t s = (k / 64) * N + n;
  return add(mul(float(awq_code(qweight, K, n, k)), wscales[s]), wzeros[s]);
}

}  // namespace diffq::backend::cuda::blockq
