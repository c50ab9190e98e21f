// The bitsandbytes 4-bit (NF4 / FP4) dequantization of a flat range of elements of the packed weight (two
// codes per byte, element 2k in the HIGH nibble) to float32, dst[i] = code[nibble] * absmax[block]: the
// scalar reference. The CPU's Highway kernel (backend/cpu/quant/bnb_4bit_dequant.h) gives identical bits
// (one f32 multiply per element).
#pragma once

#include <cstdint>

namespace diffq::quant::bnb {

// The 256-entry table of both codes of every byte value: pairs[2b] = code[b >> 4], pairs[2b+1] =
// code[b & 15] (512 floats).
void build_pair_table(const float* code16, float* pairs512);

// Elements [e0, e1) of the flat weight. absmax[i] holds block (block0 + i); blocksize >= 2.
// `packed` holds (total + 1) / 2 bytes; `nbytes` is that count.
void dequant_4bit_range_scalar(const uint8_t* packed, int64_t nbytes, const float* pairs512, const float* absmax,
                               int64_t block0, int64_t blocksize, int64_t e0, int64_t e1, float* dst);

}  // namespace diffq::quant::bnb
