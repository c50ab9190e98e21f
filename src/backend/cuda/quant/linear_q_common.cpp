#include "backend/cuda/quant/linear_q_common.h"

#include "backend/cuda/runtime.h"

namespace diffq::backend::cuda {

Tensor dequantize_then_linear(const OpCall& c, const char* scheme, std::initializer_list<const Tensor*> packed,
                              const Tensor& x, const Tensor& bias, const std::function<void(Tensor& wd)>& fill) {
  for (const Tensor* t : packed)
    check(t->device() == x.device(), "linear_q", "cuda: the ", scheme, " weight is on ", t->device().str(), ", x on ",
          x.device().str());
  Tensor wd = Tensor::empty(c.attrs.packed->shape(), x.dtype(), x.device());
  {
    DeviceGuard guard(x.device().index);
    fill(wd);
  }
  return ops::execute(OpCall{OpKind::linear, {x, wd, bias}, {}});
}

Tensor dequantize_then_linear(const OpCall& c, const char* scheme, std::initializer_list<const Tensor*> packed,
                              const std::function<void(Tensor& wd)>& fill) {
  return dequantize_then_linear(c, scheme, packed, c.inputs[0], c.inputs.size() > 1 ? c.inputs[1] : Tensor(), fill);
}

// Every scheme with a CUDA kernel, registered by its file.
void register_linear_q_kernels() {
  register_linear_q_torchao_kernels();
  register_linear_q_gguf_kernels();
  register_linear_q_bnb_kernels();
  register_linear_q_quanto_kernels();
  register_linear_q_sdnq_kernels();
  register_linear_q_autoround_kernels();
  register_linear_q_scaled_kernels();
  register_linear_q_nunchaku_kernels();
}

}  // namespace diffq::backend::cuda
