// Scalar references of the nodes the fusing passes make (what a device's compile backend must compute,
// compile_backend.h): the tests' oracle for every device's fused kernels.
#pragma once

#include <vector>

#include "compile/graph.h"

namespace diffq::compile {

// A fused program element by element, the C library's math, each register rounded as the eager ops
// round; `leaves` broadcast to out's shape.
void run_fused_reference(const FusedProgram& p, const std::vector<Tensor>& leaves, Tensor& out);
// RMSNorm + RoPE: f64 statistics and rotation, the same roundings; out [B, S, H, D].
void run_norm_rope_reference(const NormRope& p, const std::vector<Tensor>& leaves, Tensor& out);

}  // namespace diffq::compile
