// linear_q on CUDA for GGUF weights (gguf_<type>): Diffusers' GGUFLinear dequantizes the weight (gguf-py's
// f32 values), casts it to compute_dtype and runs F.linear with the bias cast the same way. Here every
// element is decoded on the device (blockq::gguf_value, one thread per element) into a buffer of x's dtype,
// rounded through compute_dtype on the way, then the dense cuBLASLt linear. The packed bytes are what
// lives on the GPU (the weight's storage, uploaded once at load).
#include <cctype>
#include <string>

#include "backend/cuda/quant/dequant_kernels.h"
#include "backend/cuda/quant/linear_q_common.h"
#include "quant/gguf/gguf_weight.h"

namespace diffq::backend::cuda {

namespace {

using quant::GGUFQuantizedWeight;

void gguf_linear(const OpCall& c, Tensor& out) {
  const auto& w = linear_q_weight<GGUFQuantizedWeight>(
      c, "gguf", [](const GGUFQuantizedWeight& g) { return !blockq::gguf_type_decodable(uint32_t(g.type())); });
  const Tensor data = w.data().contiguous();
  const Tensor& x = c.inputs[0];
  Tensor bias = c.inputs.size() > 1 ? c.inputs[1] : Tensor();
  if (bias.defined() && w.compute_dtype() != DType::f32) bias = bias.to(w.compute_dtype()).to(x.dtype());
  const int64_t N = w.shape()[0], K = w.shape()[1];
  out = dequantize_then_linear(c, "gguf", {&data}, x, bias, [&](Tensor& wd) {
    dequant_gguf(static_cast<const uint8_t*>(data.data_ptr()), uint32_t(w.type()), N, K, w.row_bytes(),
                 w.traits().block_size(), w.traits().type_size(), w.compute_dtype(), wd.data_ptr(), wd.dtype(),
                 wd.device().index);
  });
}

}  // namespace

void register_linear_q_gguf_kernels() {
  for (const quant::gguf::TypeTraits& t : quant::gguf::supported_types()) {
    if (!blockq::gguf_type_decodable(uint32_t(t.type))) continue;
    std::string scheme = "gguf_" + std::string(t.name());
    for (char& ch : scheme) ch = char(std::tolower(static_cast<unsigned char>(ch)));
    ops::register_linear_q_kernel(DeviceKind::cuda, scheme, gguf_linear);
  }
}

}  // namespace diffq::backend::cuda
