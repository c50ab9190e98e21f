// What the rest of diffq (`diffq info`, tests) may ask about the CUDA backend's cuDNN paths, without
// any CUDA or cuDNN header: implemented in cudnn_handle.cpp, in builds with and without cuDNN.
#pragma once

#include <string>

namespace diffq::backend::cuda {

// True when this build links cuDNN and its frontend (CMake found both: DIFFQ_HAS_CUDNN).
bool cudnn_built();

// "9.19.0 (run time)" where a GPU is present (cudnnGetVersion of the loaded library), else the
// compiled-in version "9.19.0 (compiled against; no GPU to load it)"; "not built" without cuDNN.
std::string cudnn_version_description();

// DIFFQ_CUDA_SDPA: unset, "auto" or "cudnn" (cuDNN's fused flash attention where it takes the call,
// the simple kernel otherwise) or "simple" (always the simple kernel of attention.cu, for
// comparisons). Any other value is an error naming these.
bool sdpa_forced_simple();

// The kernels `diffq info` lists for CUDA sdpa and conv2d (what this build and the environment select).
std::string cuda_sdpa_kernel_description();
std::string cuda_conv2d_kernel_description();

}  // namespace diffq::backend::cuda
