// The CPU's kernels of compile's fused nodes (compile/graph.h): a fused elementwise program runs as one
// loop nest over the output, operands read through their broadcast strides, evaluated a chunk of
// elements at a time in f32 registers that stay in L1 (SIMD via Highway), the result rounded once to the
// output dtype; with a norm prologue row by row, with a GEMM prologue part by part of the GEMM's output.
#pragma once

#include <vector>

#include "compile/compile_backend.h"
#include "compile/graph.h"

namespace diffq::backend::cpu {

// `leaves` broadcast to out's shape; out's rows contiguous (it may alias a leaf read whole: each chunk
// is loaded before it is stored). `qlinear`: required when p.gemm is quantized.
void run_fused(const compile::FusedProgram& p, const std::vector<Tensor>& leaves, Tensor& out,
               const compile::QuantizedLinear* qlinear = nullptr);

// RMSNorm + RoPE (compile::NormRope): out[B, S, H, D] with rows of D; leaves as the node's inputs.
void run_norm_rope(const compile::NormRope& p, const std::vector<Tensor>& leaves, Tensor& out);

}  // namespace diffq::backend::cpu
