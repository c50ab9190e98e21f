// The bitsandbytes 4-bit dequantizer on the CPU: Highway-vectorised (runtime dispatch), bit-identical to
// the scalar reference quant::bnb::dequant_4bit_range_scalar (quant/bnb/bnb_4bit_dequant.h, the same
// arguments: one f32 multiply per element).
#pragma once

#include <cstdint>

namespace diffq::backend::cpu {

// Elements [e0, e1) of the flat weight. absmax[i] holds block (block0 + i); blocksize >= 2.
// `packed` holds (total + 1) / 2 bytes; `nbytes` is that count (the vector loop never reads past it).
void dequant_4bit_range(const uint8_t* packed, int64_t nbytes, const float* pairs512, const float* absmax,
                        int64_t block0, int64_t blocksize, int64_t e0, int64_t e1, float* dst);

}  // namespace diffq::backend::cpu
