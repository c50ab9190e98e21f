// One quantization backend, configured: the seam between PipelineQuantizationConfig / model loading /
// `diffq quantize` and the backends (src/quant/{bnb,torchao,quanto,gguf}). Each backend keeps its own
// config, math and file layout; an adapter per backend implements this interface (quant_method.cpp).
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "quant/quantized_weight.h"

namespace diffq::quant {

class QuantMethod {
 public:
  virtual ~QuantMethod() = default;
  virtual std::string backend() const = 0;  // PipelineQuantizationConfig's name: "bitsandbytes_4bit", ...
  virtual std::string scheme() const = 0;   // short label: "nf4", "Int8WeightOnlyConfig", "q4_K", ...
  // The quantization_config a component's config.json carries once saved.
  virtual nlohmann::json quantization_config() const = 0;
  // Whether the Linear `module` with weight `shape` is quantized (modules_to_not_convert, scheme rules).
  virtual bool should_quantize(const std::string& module, const Shape& shape) const = 0;
  virtual std::shared_ptr<QuantizedWeight> quantize(const Tensor& weight) const = 0;
  // quantize() for Linear `module` (schemes whose choice depends on the module, e.g. SDNQ's
  // modules_dtype_dict, override it). Quantize-on-load and `diffq quantize` call this one.
  virtual std::shared_ptr<QuantizedWeight> quantize_named(const std::string& module, const Tensor& weight) const {
    (void)module;
    return quantize(weight);
  }

  // Pre-quantized files. `load` returns null when `sd` holds no quantized layout for `module`;
  // it appends the keys it read to `consumed`. `metadata` is the safetensors header's, when known.
  virtual std::shared_ptr<QuantizedWeight> load(const io::StateDict& sd, const std::string& module, const Shape& shape,
                                                const io::Metadata* metadata, std::vector<std::string>& consumed) const = 0;
  // Writes the layout of `w` for Linear `module` into `out` (and the header metadata the format needs).
  virtual void save(const QuantizedWeight& w, const std::string& module, io::StateDict& out,
                    io::Metadata& metadata) const = 0;
  // Called once per written file after every tensor is in `out` (e.g. torchao's tensor_names).
  virtual void finish_file(const io::StateDict& out, io::Metadata& metadata) const;
};

// `backend` + kwargs as PipelineQuantizationConfig gives them. Errors name the backend and the field.
// `compute_dtype` fills the backends' compute dtype when the kwargs leave it open.
std::unique_ptr<QuantMethod> make_quant_method(const std::string& backend, const nlohmann::json& kwargs);
// From a saved component's config.json "quantization_config" (quant_method: bitsandbytes, torchao, quanto, gguf).
std::unique_ptr<QuantMethod> quant_method_from_config(const nlohmann::json& quantization_config,
                                                      const std::string& source);

// The CLI shorthands (`--quant nf4|fp4|int8|int8wo|int4wo|int8dq|fp8wo|fp8dq|q8_0|q4_K|quanto-int8|...`):
// backend and kwargs. `dtype` is the pipeline's compute dtype name ("bfloat16") for compute-dtype kwargs.
std::pair<std::string, nlohmann::json> quant_shorthand(const std::string& name, const std::string& dtype);
const std::vector<std::string>& quant_shorthands();

}  // namespace diffq::quant
