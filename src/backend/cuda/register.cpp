#include "backend/cuda/kernels.h"

namespace diffq::backend::cuda {

// Called once by the op dispatcher (ops/dispatch.cpp). Touches no CUDA API: a CUDA build must start
// and run its CPU paths on a machine without a GPU.
void register_kernels() {
  register_cuda_allocator(&device_allocator);
  register_copy_kernels();
  register_binary_kernels();
  register_elementwise_kernels();
  register_norm_kernels();
  register_layout_kernels();
  register_attention_kernels();
  register_gemm_kernels();
}

}  // namespace diffq::backend::cuda
