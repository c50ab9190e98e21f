// The torchao backend's integration contract (namespace diffq::quant::torchao):
//   Config::from_json / to_json                      (config.h)
//   should_quantize(module, shape, cfg)              Diffusers + torchao skip rules
//   quantize(weight, cfg)                            torchao 0.18 configs version 2, bit-exact on CPU
//   load(sd, prefix, expected, cfg, metadata)        the safetensors layout Diffusers >= 0.39 +
//   save(w, prefix, out, metadata)                   torchao >= 0.16 write: "<mod>._weight_<attr>"
//   finish_metadata(sd, metadata)                    tensors, "tensor_names" + per-key JSON metadata
#pragma once

#include <memory>
#include <string>

#include "io/safetensors.h"
#include "quant/quantized_weight.h"
#include "quant/torchao/config.h"
#include "quant/torchao/torchao_weight.h"

namespace diffq::quant::torchao {

using StateDict = io::StateDict;
using Metadata = io::Metadata;

// False when Diffusers + torchao would leave this Linear weight unquantized: the module is in
// modules_to_not_convert (Diffusers' match: "<entry>." occurs in the name, or equal), the weight is not
// 2-D, Int4WeightOnlyConfig with in_features % group_size != 0, Float8DynamicActivationFloat8Weight
// with in/out features not multiples of 16.
bool should_quantize(const std::string& module_name, const Shape& weight_shape, const Config& cfg);

// The weight [N, K] (f32, bf16 or f16) quantized as torchao does. Float8 dynamic PerRow needs bf16
// (torchao asserts it).
std::shared_ptr<QuantizedWeight> quantize(const Tensor& weight, const Config& cfg);

// The quantized weight of Linear `prefix` from a state dict holding "<prefix>._weight_<attr>" tensors.
// `metadata` (the safetensors header's) gives the tensor class and attributes ("<prefix>.weight" JSON);
// without it they follow from cfg, and the high-precision dtype is bfloat16 (Diffusers' forced dtype
// for torchao). Throws naming the key on a missing tensor or a wrong shape/dtype.
std::shared_ptr<QuantizedWeight> load(const StateDict& sd, const std::string& prefix, const Shape& expected,
                                      const Config& cfg, const Metadata* metadata = nullptr);

// Writes "<prefix>._weight_<attr>" into `out` and, when given, "<prefix>.weight" into `metadata`.
void save(const QuantizedWeight& w, const std::string& prefix, StateDict& out, Metadata* metadata = nullptr);

// Completes a file's metadata as torchao's flatten_tensor_state_dict + Diffusers do: every tensor of
// `sd` that is not part of a quantized weight gets {"_type": "Tensor"}, "tensor_names" lists every
// original key (quantized weights as "<prefix>.weight"), and "format" is "pt".
void finish_metadata(const StateDict& sd, Metadata& metadata);

}  // namespace diffq::quant::torchao
