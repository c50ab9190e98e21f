// The quantization_config ModelOpt's export (modelopt.torch.export.export_hf_checkpoint) writes into a
// component's config.json: {"quant_method": "modelopt", "quant_algo": "FP8" | "FP8_PER_CHANNEL_PER_TOKEN" |
// "W8A8_SQ_PER_CHANNEL" | "INT8_SQ" | "INT8_WO" | "W8A16" | "W4A16_AWQ" | "NVFP4" | "W4A16_NVFP4" |
// "MIXED_PRECISION", "ignore": [modules], "quantized_layers": {module: {"quant_algo", ...}} (mixed only),
// "config_groups", "producer"}. Which layers are quantized is read from the tensors (a `.weight_scale`);
// the algorithm says how to read them.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace diffq::quant {

enum class ModelOptAlgo { fp8, fp8_per_channel, int8, int4_awq, nvfp4 };

struct ModelOptConfig {
  std::string quant_algo;                          // as written
  std::vector<std::string> ignore;                 // modules left unquantized
  std::map<std::string, std::string> layer_algo;   // MIXED_PRECISION: module -> quant_algo
  nlohmann::json raw;

  // Errors name `source` and the field: an unsupported quant_algo, or Diffusers' own NVIDIAModelOptConfig
  // (quant_type, a ModelOpt restore state rather than an export).
  static ModelOptConfig from_json(const nlohmann::json& qc, const std::string& source);
  // The algorithm of Linear `module` (MIXED_PRECISION: its entry; none when it has none).
  std::optional<ModelOptAlgo> algo_for(const std::string& module) const;
};

// "FP8" -> fp8, ...; nullopt for names diffq does not read.
std::optional<ModelOptAlgo> parse_modelopt_algo(const std::string& quant_algo);
const char* modelopt_scheme_name(ModelOptAlgo a);  // "modelopt_fp8", "modelopt_fp8_pc", "modelopt_int8", ...

}  // namespace diffq::quant
