// Row dequantizers of the torchao weights used by the tiled linear (f32 out, exact torchao arithmetic).
#pragma once

#include <cstdint>

namespace diffq::quant::torchao {

// Int4Tensor row: k codes packed two per byte (even column in the low nibble, signed), one scale/zero
// per group of g: dst[c] = float(q) * scale + zero (two f32 roundings, never fused).
void dequant_int4_row(const uint8_t* packed, int64_t k, int64_t g, const float* scale, const float* zero, float* dst);
void dequant_int4_row_reference(const uint8_t* packed, int64_t k, int64_t g, const float* scale, const float* zero,
                                float* dst);

}  // namespace diffq::quant::torchao
