// The CPU's driver of every quantized linear that dequantizes (quant/tile_linear_plan.h): y = x @ W^T + bias
// where W [N, K] is produced by the plan's dequant_rows tile by tile (up to ~16 MiB of f32 rows at a time)
// and consumed at once by the f32 GEMM, or by the bf16 GEMM where x is bf16, the bf16 GEMM is native
// (gemm.h) and every dequantized value of the tile is exactly a bf16 (the same products). The
// full-precision weight is never materialised beyond one tile. The driver calls dequant_rows from several
// threads at once on disjoint row ranges.
//
// The same computation can deliver y part by part (tile_linear_parts): compile's GEMM epilogue runs on
// each part of a quantized linear's output as it does for a dense linear ("dequantize inside the GEMM").
#pragma once

#include <cstdint>

#include "backend/cpu/gemm.h"
#include "diffq/tensor.h"
#include "quant/tile_linear_plan.h"

namespace diffq::backend::cpu {

// x [..., K] (f32, bf16 or f16, any strides) -> [..., N] in x's dtype.
Tensor run_tile_linear(const quant::TileLinearPlan& plan);
// The same values part by part: parts.begin gives where each part of y [M, N] goes, parts.end gets it in
// f32 with the bias added; with `round`, each value also rounded to x's dtype (run_tile_linear's result,
// held in f32). The parts are the f32 GEMM's (sgemm_parts) within each tile of W's rows, so
// run_tile_linear's bits.
void tile_linear_parts(const quant::TileLinearPlan& plan, const GemmParts& parts, bool round = false);

// run_tile_linear({x, bias, N, K, dequant_rows}).
Tensor dequant_tile_linear(const Tensor& x, const Tensor& bias, int64_t N, int64_t K,
                           const quant::DequantRows& dequant_rows);

// Rows per tile used for a given K (exposed for tests and benchmarks).
int64_t dequant_tile_rows(int64_t N, int64_t K);

}  // namespace diffq::backend::cpu
