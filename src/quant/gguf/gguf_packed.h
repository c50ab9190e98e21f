// A tensor as a GGUF file stores it — ggml type, torch-order shape, bytes — and the row operations
// single-file checkpoints need on those bytes without dequantizing: row ranges (BFL's fused qkv /
// linear1 split into Diffusers' to_q/k/v), concatenation (fused back when writing) and the halves swap
// of final_layer.adaLN_modulation.1. Blocks run along the innermost dim, so a row range is a byte range
// as long as it starts and ends on a block boundary (always true for 2-D tensors; a 1-D quantized
// tensor split inside a block is an error).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "diffq/tensor.h"
#include "quant/gguf/gguf_quants.h"

namespace diffq::quant::gguf {

struct PackedTensor {
  uint32_t type = 0;  // ggml type id
  Shape shape;        // torch order; the innermost dim is a whole number of blocks
  Tensor bytes;       // 1-D uint8, exactly numel / block_size * type_size bytes
};

// Rows [r0, r1) along dim 0 (a view of the bytes). `what` names the tensor in errors.
PackedTensor packed_rows(const PackedTensor& t, int64_t r0, int64_t r1, std::string_view what);
// Concatenation along dim 0 of tensors of one type and equal trailing dims (a copy).
PackedTensor packed_concat(const std::vector<PackedTensor>& parts, std::string_view what);
// The second half of the rows, then the first (a copy).
PackedTensor packed_swap_halves(const PackedTensor& t, std::string_view what);

// Quantizes a dense tensor (any float dtype, any rank) to `type` row by row with ggml's reference
// quantizer; the innermost dim must be a whole number of blocks.
PackedTensor packed_quantize(const Tensor& dense, GGMLType type, std::string_view what);
// The values as f32, bit-exact with gguf-py's dequantize.
Tensor packed_dequantize(const PackedTensor& t, std::string_view what);
// F32 / F16 / BF16 bytes as a dense tensor of that dtype sharing the bytes; other types: nothing.
Tensor packed_as_dense(const PackedTensor& t);

}  // namespace diffq::quant::gguf
