#include "backend/cpu/compile/cpu_compile_backend.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/packed_linear_weight.h"
#include "backend/cpu/simd_targets.h"

namespace diffq::backend::cpu {

void register_kernels() {
  apply_simd_target_env();  // DIFFQ_SIMD_TARGET, before the first kernel dispatches
  register_copy_kernels();
  register_linear_kernels();
  register_elementwise_kernels();
  register_unary_kernels();
  register_softmax_kernels();
  register_norm_kernels();
  register_channel_norm_kernels();
  register_mul_add_kernel();
  register_rope_kernels();
  register_norm_rope_kernel();
  register_attention_kernels();
  register_conv_kernels();
  register_layout_kernels();
  register_reduce_kernels();
  register_linear_q_kernels();
  register_packed_linear_weight();  // dense bf16 linear weights packed once for oneDNN
  register_compile_backend();  // compile's fused kernels and autotune (backend/cpu/compile)
}

}  // namespace diffq::backend::cpu
