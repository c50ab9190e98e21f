// The CPU's compile backend (compile/compile_backend.h): its fused kernels (fused_kernel.h), the linear
// written into a concat's buffer (placed_linear.h), quantized GEMM prologues (quant/linear_q_parts.h) and
// max-autotune over its kernel tunings (autotune_candidates.h, tuning_json.h, tuning.h).
#pragma once

#include "backend/cpu/tuning.h"
#include "compile/compile_backend.h"

namespace diffq::backend::cpu {

// Registers it for DeviceKind::cpu (register.cpp, with the op kernels).
void register_compile_backend();

// A CPU tuning as compile holds it (empty for the defaults) and back (the defaults for an empty one).
compile::KernelTuning kernel_tuning(const Tuning& t);
Tuning cpu_tuning(const compile::KernelTuning& t);

}  // namespace diffq::backend::cpu
