#include "backend/cuda/compile/cuda_compile_backend.h"
#include "backend/cuda/kernels.h"

namespace diffq::backend::cuda {

// Called once by the op dispatcher (ops/dispatch.cpp). Touches no CUDA API: a CUDA build must start
// and run its CPU paths on a machine without a GPU.
void register_kernels() {
  register_copy_kernels();
  register_binary_kernels();
  register_elementwise_kernels();
  register_norm_kernels();
  register_layout_kernels();
  register_attention_kernels();
  register_gemm_kernels();
  register_group_norm_kernels();
  register_channel_norm_kernels();
  register_upsample_kernels();
  register_embedding_kernels();
  register_absmax_kernels();
  register_cudnn_kernels();
  register_linear_q_kernels();
  register_compile_backend();  // compile's fused elementwise kernel (backend/cuda/compile)
}

}  // namespace diffq::backend::cuda
