// The shared driver of every quantized CPU linear: y = x @ W^T + bias where W [N, K] is produced by
// the scheme tile by tile (up to ~16 MiB of f32 rows at a time) and consumed at once
// by the f32 GEMM. The full-precision weight is never materialised beyond one tile.
//
// A scheme supplies `dequant_rows(n0, n1, dst)`: rows [n0, n1) of W as f32, row-major, K per row,
// bit-identical to its reference dequantization. The driver calls it from several threads at once
// on disjoint row ranges.
#pragma once

#include <cstdint>
#include <functional>

#include "diffq/tensor.h"

namespace diffq::quant {

using DequantRows = std::function<void(int64_t n0, int64_t n1, float* dst)>;

// x [..., K] (f32, bf16 or f16, any strides) -> [..., N] in x's dtype; bias [N] optional.
// f32 accumulation; for bf16/f16 x the result is rounded once at the end (as torch's CPU linear).
Tensor dequant_tile_linear(const Tensor& x, const Tensor& bias, int64_t N, int64_t K, const DequantRows& dequant_rows);

// Rows per tile used for a given K (exposed for tests and benchmarks).
int64_t dequant_tile_rows(int64_t N, int64_t K);

}  // namespace diffq::quant
