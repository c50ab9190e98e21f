// Element loads/stores for CUDA kernels, bit-exact with the CPU's scalar conversions in
// include/diffq/dtype.h (torch's rounding): bf16 by the same integer rounding trick and NaN -> 0x7fc0,
// f16 by the same FP16-library sequence with NaN -> 0x7e00. The hardware cvt instructions round the
// same way for finite values but give other NaN bits (0x7fff), hence the explicit versions. (GPU float
// arithmetic on a NaN returns the canonical NaN 0x7fffffff where x86 keeps the payload; only the
// conversions are made to match: a binary op's NaN result has equal value, not equal bits.) __fmul_rn
// and friends keep nvcc from contracting the sequence into FMAs, which would change its rounding.
#pragma once

#include <cstdint>

#include "diffq/dtype.h"

namespace diffq::backend::cuda {

__device__ __forceinline__ float bf16_bits_to_f32(uint16_t h) { return __uint_as_float(uint32_t(h) << 16); }

__device__ __forceinline__ uint16_t f32_to_bf16_bits(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

__device__ __forceinline__ float f16_bits_to_f32(uint16_t h) {
  const uint32_t w = uint32_t(h) << 16;
  const uint32_t sign = w & 0x80000000u;
  // NaN: the CPU's multiply below keeps the payload and sets the quiet bit; the GPU's would return the
  // canonical NaN, so spell out the CPU's result.
  if ((h & 0x7fffu) > 0x7c00u) return __uint_as_float(sign | 0x7fc00000u | (uint32_t(h & 0x3ffu) << 13));
  const uint32_t two_w = w + w;
  const float normalized = __fmul_rn(__uint_as_float((two_w >> 4) + (0xE0u << 23)), 0x1.0p-112f);
  const float denormalized = __fsub_rn(__uint_as_float((two_w >> 17) | (126u << 23)), 0.5f);
  return __uint_as_float(sign | (two_w < (1u << 27) ? __float_as_uint(denormalized)
                                                    : __float_as_uint(normalized)));
}

__device__ __forceinline__ uint16_t f32_to_f16_bits(float f) {
  float base = __fmul_rn(__fmul_rn(fabsf(f), 0x1.0p+112f), 0x1.0p-110f);
  const uint32_t w = __float_as_uint(f);
  const uint32_t shl1_w = w + w;
  const uint32_t sign = w & 0x80000000u;
  uint32_t bias = shl1_w & 0xFF000000u;
  if (bias < 0x71000000u) bias = 0x71000000u;
  base = __fadd_rn(__uint_as_float((bias >> 1) + 0x07800000u), base);
  const uint32_t bits = __float_as_uint(base);
  const uint32_t exp_bits = (bits >> 13) & 0x00007C00u;
  const uint32_t mantissa_bits = bits & 0x00000FFFu;
  const uint32_t nonsign = exp_bits + mantissa_bits;
  return uint16_t((sign >> 16) | (shl1_w > 0xFF000000u ? 0x7E00u : nonsign));
}

// The dtypes the float kernels read and write; the host checks this before launching.
inline bool is_kernel_float(DType t) { return t == DType::f32 || t == DType::f16 || t == DType::bf16; }

// Element i of a buffer of dtype t (one of is_kernel_float) as f32.
__device__ __forceinline__ float load_f32(const void* base, DType t, int64_t i) {
  switch (t) {
    case DType::f16: return f16_bits_to_f32(static_cast<const uint16_t*>(base)[i]);
    case DType::bf16: return bf16_bits_to_f32(static_cast<const uint16_t*>(base)[i]);
    default: return static_cast<const float*>(base)[i];
  }
}

// v rounded to dtype t (one of is_kernel_float) and widened back: what store_f32 then load_f32 give.
__device__ __forceinline__ float round_f32(DType t, float v) {
  switch (t) {
    case DType::f16: return f16_bits_to_f32(f32_to_f16_bits(v));
    case DType::bf16: return bf16_bits_to_f32(f32_to_bf16_bits(v));
    default: return v;
  }
}

// Writes v rounded to dtype t (one of is_kernel_float) as element i.
__device__ __forceinline__ void store_f32(void* base, DType t, int64_t i, float v) {
  switch (t) {
    case DType::f16: static_cast<uint16_t*>(base)[i] = f32_to_f16_bits(v); return;
    case DType::bf16: static_cast<uint16_t*>(base)[i] = f32_to_bf16_bits(v); return;
    default: static_cast<float*>(base)[i] = v; return;
  }
}

}  // namespace diffq::backend::cuda
