// Row ranges of packed per-row tensors (weights and their per-row / per-block scales), for the single-file
// converters that split fused weights (qkv, linear1) and swap halves (final_layer.adaLN_modulation.1)
// on the quantized layout, so the scales stay with their rows (as Diffusers' BFLQuantizedParameter does).
#pragma once

#include <utility>
#include <vector>

#include "diffq/tensor.h"

namespace diffq::quant {

using RowRanges = std::vector<std::pair<int64_t, int64_t>>;  // [r0, r1) along dim 0, concatenated in order

// A new contiguous tensor holding rows `ranges` of `t` (any dtype, dim >= 1). Errors name `what`.
Tensor select_rows(const Tensor& t, const RowRanges& ranges, const std::string& what);

}  // namespace diffq::quant
