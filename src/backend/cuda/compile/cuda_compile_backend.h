// Registers the CUDA compile backend (cuda_compile_backend.cpp) with compile; called with the CUDA
// kernels' registration (touches no CUDA API).
#pragma once

namespace diffq::backend::cuda {

void register_compile_backend();

}  // namespace diffq::backend::cuda
