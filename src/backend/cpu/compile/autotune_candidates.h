// max-autotune's candidates on the CPU (compile/autotune.h): the runtime choices of tuning.h that change
// how a node's kernel runs, on its real shapes.
//   - linear / matmul (f32 and bf16), and a linear fused with its elementwise epilogue: how sgemm splits
//     C over the thread pool (rows, cols; the default is the longer side) x parts per thread (1, 2, 4),
//     and "none" (one single-threaded call) for GEMMs under 2^26 multiply-adds; nothing for a GEMM too
//     small to be split (gemm_split_plan) or a single thread. Splits that give the same parts as one
//     already listed are dropped.
//   - sdpa: query x key tile sizes around the flash kernel's default 48 x 256, {24, 48, 96, 192} x
//     {128, 256, 512, 1024}, limited to the shape (tilings that are the same for it listed once).
//   - nothing else: other fused nodes, quantized GEMM prologues (their scheme's kernel), opaque calls.
#pragma once

#include <vector>

#include "backend/cpu/tuning.h"
#include "compile/graph.h"

namespace diffq::backend::cpu {

// The candidates of a node on its real call with `threads` pool threads, the defaults first; empty when
// the node has no choice that changes how it runs.
std::vector<Tuning> autotune_candidates(const compile::Node& n, const ops::OpCall& call, int threads);

}  // namespace diffq::backend::cpu
