// FP4 E2M1 (NVFP4's element type): a 4-bit code, bit 3 the sign, bits 2-0 the magnitude, whose values are
// the grid {0, 0.5, 1, 1.5, 2, 3, 4, 6}. Two codes per byte, the even element in the low nibble
// (ModelOpt's NVFP4 packing, which BFL's nvfp4 files and Diffusers' dequantize_nvfp4 use).
#pragma once

#include <cstdint>

namespace diffq::quant {

inline constexpr float kE2m1Values[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                          -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

inline float e2m1_to_f32(uint8_t code) { return kE2m1Values[code & 0x0f]; }

}  // namespace diffq::quant
