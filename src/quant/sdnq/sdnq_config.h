// Diffusers' SDNQConfig (forwarded to sdnq 0.2.8's SDNQConfig): the kwargs of quantize-on-load and the
// "quantization_config" of a saved SDNQ model. diffq implements plain SDNQ (see sdnq_weight.h) for the
// dtypes of sdnq_dtypes.h; the options that change the format or its math are refused naming the field
// (use_svd, use_hadamard, use_codebook, scale_dtype / zero_point_dtype double quantization,
// use_quantized_matmul, modules_quant_config, is_training), and, for quantize-on-load only, the
// non-deterministic or search-based ones (use_stochastic_rounding, use_dynamic_quantization).
#pragma once

#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "diffq/tensor.h"
#include "quant/sdnq/sdnq_dtypes.h"

namespace diffq::quant::sdnq {

struct SdnqConfig {
  std::string weights_dtype = "int8";
  int64_t group_size = 0;
  bool dequantize_fp32 = true;
  bool add_skip_keys = true;
  int64_t minimum_allowed_numel = 16384;
  int64_t minimum_allowed_channel_size = 32;
  std::vector<std::string> modules_to_not_convert;
  std::map<std::string, std::vector<std::string>> modules_dtype_dict;
  nlohmann::json raw = nlohmann::json::object();  // every key as given (written back by to_json)

  // `pre_quantized`: a saved config (quant_method "sdnq"), where the quantize-time-only options
  // (stochastic rounding, dynamic dtype search) are accepted. Errors name the field and value.
  static SdnqConfig from_json(const nlohmann::json& j, bool pre_quantized);
  // The config a saved model carries: `raw` + defaults + the Linear weights left dense in
  // modules_to_not_convert (as the library records them), quant_method "sdnq".
  nlohmann::json to_json(const std::vector<std::string>& dense_params = {}) const;

  // sdnq's check_param_name_in(param, list): ".x" prefixes, exact names, path elements, "*" patterns.
  static bool name_in(const std::string& param, const std::vector<std::string>& list);
  // The weights dtype of Linear `module` (modules_dtype_dict, "minimum_<n>bit" keys included).
  const SdnqDtype& dtype_for(const std::string& module) const;
  // Whether quantize-on-load quantizes Linear `module` of shape [N, K]: not in modules_to_not_convert
  // (plus, with add_skip_keys, sdnq's list for the model class, recognised by the module names:
  // FluxTransformer2DModel, WanTransformer3DModel, else sdnq's common keys), K >= minimum channels,
  // N*K >= minimum numel.
  bool should_quantize(const std::string& module, const Shape& shape) const;
};

}  // namespace diffq::quant::sdnq
