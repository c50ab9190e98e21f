// compile's fused elementwise node on CUDA (compile/graph.h FusedProgram without a norm or GEMM
// prologue): the program interpreted per output element in one kernel, each register in f32 rounded to
// its dtype as the eager op rounds its output, with the eager CUDA kernels' own math
// (elementwise_math.cuh), so a fused chain gives the eager ops' bits and reads and writes memory once.
// The scalar reference is compile's run_fused_reference (compile/fused_reference.h).
#pragma once

#include <vector>

#include "compile/graph.h"
#include "diffq/tensor.h"

namespace diffq::backend::cuda {

// Programs up to kMaxFusedInstrs instructions over up to kMaxFusedLeaves leaves run as one kernel; a
// longer one runs instruction by instruction through the eager kernels (the same values).
inline constexpr int kMaxFusedInstrs = 64;
inline constexpr int kMaxFusedLeaves = 8;

// out (contiguous, on the leaves' device) = the program over `leaves` broadcast to out's shape.
void run_fused(const compile::FusedProgram& p, const std::vector<Tensor>& leaves, Tensor& out);

}  // namespace diffq::backend::cuda
