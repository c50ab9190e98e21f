// The common base of diffq's torchao weights: a QuantizedWeight that knows its torchao tensor class
// ("Int8Tensor", ...), the tensor attributes torchao serializes ("_data" of the safetensors metadata),
// its named tensor data (qdata, scale, zero_point), and a row dequantizer shared by dequantize() and
// the tiled linear.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "quant/quantized_weight.h"

namespace diffq::quant::torchao {

class TorchaoWeight : public QuantizedWeight {
 public:
  Shape shape() const override { return {n_, k_}; }
  DType dtype() const { return dtype_; }  // the original (high-precision) weight dtype
  virtual std::string tensor_class() const = 0;
  virtual nlohmann::json tensor_attributes() const = 0;
  // (name, tensor) in torchao's _tensor_data_names order; only tensors that are present.
  virtual std::vector<std::pair<std::string, Tensor>> tensor_data() const = 0;
  std::vector<Tensor> storage_tensors() const override;
  // Rows [n0, n1) of the weight dequantized as torchao's dequantize(out) computes it, widened to f32
  // (K floats per row). Thread-safe.
  virtual void dequant_rows(int64_t n0, int64_t n1, DType out, float* dst) const = 0;
  Tensor dequantize(DType dtype) const override;
  // The safetensors metadata value torchao writes for this weight: {"_type", "_data", "_tensor_data_names"}.
  nlohmann::json metadata_json() const;

 protected:
  TorchaoWeight(int64_t n, int64_t k, DType dtype) : n_(n), k_(k), dtype_(dtype) {}
  int64_t n_, k_;
  DType dtype_;
};

// {"_type": "torch.dtype", "_data": "bfloat16"}
nlohmann::json torch_dtype_json(DType d);

}  // namespace diffq::quant::torchao
