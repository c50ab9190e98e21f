// torchao's Int4Tensor row dequantizer on the CPU: a Highway kernel, bit-identical to the scalar reference
// quant::torchao::dequant_int4_row_reference (quant/torchao/int4_weight.h, the same arguments).
#pragma once

#include <cstdint>

namespace diffq::backend::cpu {

// Int4Tensor row: k codes packed two per byte (even column in the low nibble, signed), one scale/zero
// per group of g: dst[c] = float(q) * scale + zero (two f32 roundings, never fused).
void dequant_int4_row(const uint8_t* packed, int64_t k, int64_t g, const float* scale, const float* zero, float* dst);

}  // namespace diffq::backend::cpu
