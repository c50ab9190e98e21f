#include "quant/torchao/torchao_weight.h"

#include "core/thread_pool.h"
#include "diffq/error.h"

namespace diffq::quant::torchao {

std::vector<Tensor> TorchaoWeight::storage_tensors() const {
  std::vector<Tensor> out;
  for (auto& [name, t] : tensor_data()) out.push_back(t);
  return out;
}

Tensor TorchaoWeight::dequantize(DType dtype) const {
  check(dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f16, "torchao.dequantize",
        "output dtype ", dtype_name(dtype), " is not float32, bfloat16 or float16");
  Tensor f = Tensor::empty({n_, k_}, DType::f32);
  float* p = f.data<float>();
  core::parallel_for(n_, 16, [&](int64_t a, int64_t b) { dequant_rows(a, b, dtype, p + a * k_); });
  return dtype == DType::f32 ? f : f.to(dtype);  // values are exact in `dtype`: the cast only narrows
}

nlohmann::json TorchaoWeight::metadata_json() const {
  nlohmann::json names = nlohmann::json::array();
  for (auto& [name, t] : tensor_data()) names.push_back(name);
  return {{"_type", tensor_class()}, {"_data", tensor_attributes()}, {"_tensor_data_names", names}};
}

nlohmann::json torch_dtype_json(DType d) {
  return {{"_type", "torch.dtype"}, {"_data", std::string(dtype_name(d))}};
}

}  // namespace diffq::quant::torchao
