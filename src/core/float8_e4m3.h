// f32 -> float8_e4m3fn as torch 2.15's tensor cast does it (checked against
// tests/fixtures/core/casts.safetensors): NaN stays NaN; |x| >= 464 (what would round past 448), inf
// included, saturates to +-448; subnormals via a magic add; normals with round-to-nearest-even on the
// dropped 20 mantissa bits. One definition for the host (diffq::f32_to_f8_e4m3fn) and the CUDA kernels
// (compiled by nvcc as a host/device function).
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define DIFFQ_F8_HD __host__ __device__ inline
#else
#define DIFFQ_F8_HD inline
#endif

namespace diffq::core {

DIFFQ_F8_HD uint8_t f32_to_e4m3fn_bits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  const uint32_t sign = bits & 0x80000000u;
  bits ^= sign;
  uint8_t result;
  if (bits > 0x7f800000u) {
    result = 0x7f;
  } else if (bits >= 0x43e80000u) {  // 464.0
    result = 0x7e;
  } else if (bits < (121u << 23)) {
    const uint32_t denorm_mask = 141u << 23;
    float a, b;
    std::memcpy(&a, &bits, 4);
    std::memcpy(&b, &denorm_mask, 4);
    const float sum = a + b;
    std::memcpy(&bits, &sum, 4);
    result = uint8_t(bits - denorm_mask);
  } else {
    const uint32_t mant_odd = (bits >> 20) & 1u;
    bits += (uint32_t(7 - 127) << 23) + 0x7FFFFu;
    bits += mant_odd;
    result = uint8_t(bits >> 20);
  }
  return uint8_t(result | (sign >> 24));
}

}  // namespace diffq::core

#undef DIFFQ_F8_HD
