// What a scheme's linear computes when it dequantizes W tile by tile into a float GEMM, described
// device-neutrally: y = x @ W^T + bias where W [N, K] is produced by the scheme row range by row range.
// The scheme supplies `dequant_rows(n0, n1, dst)`: rows [n0, n1) of W as f32, row-major, K per row, its
// reference dequantization (plain C++; callable from several threads at once on disjoint row ranges).
// A backend runs the plan with its own GEMM and may replace the rows by its own bit-identical kernels
// (the CPU's: backend/cpu/quant/tile_linear.h, backend/cpu/quant/dequant_rows.h).
#pragma once

#include <cstdint>
#include <functional>

#include "diffq/tensor.h"

namespace diffq::quant {

using DequantRows = std::function<void(int64_t n0, int64_t n1, float* dst)>;

// y = x @ W^T + bias with f32 accumulation, then rounded once to x's dtype.
// x: [..., K] as the scheme feeds the GEMM (already converted to its compute dtype where the scheme
// does that); bias: [N] as the scheme adds it, undefined when absent.
struct TileLinearPlan {
  Tensor x;
  Tensor bias;
  int64_t N = 0, K = 0;
  DequantRows dequant_rows;
};

}  // namespace diffq::quant
