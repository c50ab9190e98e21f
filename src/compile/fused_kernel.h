// Runs a fused elementwise program: one loop nest over the (contiguous) output, operands read through
// their broadcast strides, the program evaluated a chunk of elements at a time in f32 registers that
// stay in L1 (SIMD via Highway), the result rounded once to the output dtype.
#pragma once

#include <vector>

#include <functional>

#include "compile/graph.h"

namespace diffq::backend::cpu {
struct GemmParts;
}

namespace diffq::compile {

// The GEMM of a quantized GEMM prologue (GemmPrologue::module), bound by the executor to the module
// being run: delivers y = linear(x) part by part in f32, each value already holding the scheme's
// rounding (before the prologue's own rounding to its dtype).
using QuantizedGemm = std::function<void(const Tensor& x, const backend::cpu::GemmParts& parts)>;

// `leaves` broadcast to out's shape; out is contiguous (it may alias a leaf read whole: each chunk is
// loaded before it is stored).
// `qgemm`: required when p.gemm is quantized.
void run_fused(const FusedProgram& p, const std::vector<Tensor>& leaves, Tensor& out,
               const QuantizedGemm* qgemm = nullptr);
// Scalar reference: element by element, the C library's math, same roundings (tests).
void run_fused_reference(const FusedProgram& p, const std::vector<Tensor>& leaves, Tensor& out);

// RMSNorm + RoPE (NormRope): out[B, S, H, D] contiguous; leaves as the node's inputs.
void run_norm_rope(const NormRope& p, const std::vector<Tensor>& leaves, Tensor& out);
// Scalar reference: f64 statistics and rotation, the same roundings (tests).
void run_norm_rope_reference(const NormRope& p, const std::vector<Tensor>& leaves, Tensor& out);

}  // namespace diffq::compile
