// PipelineQuantizationConfig (Diffusers quantizers/pipe_quant_config.py, diffusers-spec.md §C): which
// pipeline components get quantized, with which backend and kwargs.
//
// Global mode: quant_backend + quant_kwargs (+ components_to_quantize: a list, or one string; empty =
// every model component). Granular mode: quant_mapping {component: {backend, kwargs}}. Diffusers'
// validation errors, in Diffusers' words: both or neither of backend and mapping, empty kwargs
// without a mapping, an unknown backend, a mapping entry that is not a known config. Names that are
// not components of the pipeline only warn (warn_unknown_components). Schedulers and tokenizers are
// never quantized.
//
// JSON form (`--quant-config q.json`):
//   {"quant_backend": "bitsandbytes_4bit", "quant_kwargs": {...}, "components_to_quantize": [...]}
//   {"quant_mapping": {"transformer": {"quant_backend": "torchao", "quant_kwargs": {...}},
//                      "text_encoder_2": {"_class": "BitsAndBytesConfig", "load_in_8bit": true}}}
// A mapping entry is either {quant_backend, quant_kwargs} or a Diffusers config class name in "_class"
// (BitsAndBytesConfig, TorchAoConfig, GGUFQuantizationConfig, QuantoConfig) with its kwargs beside it.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace diffq {

struct ComponentQuantization {
  std::string backend;    // "bitsandbytes_4bit", "bitsandbytes_8bit", "torchao", "quanto", "gguf"
  nlohmann::json kwargs;  // the backend config's keyword arguments
};

class PipelineQuantizationConfig {
 public:
  PipelineQuantizationConfig(std::optional<std::string> quant_backend, nlohmann::json quant_kwargs,
                             std::vector<std::string> components_to_quantize,
                             std::optional<std::map<std::string, ComponentQuantization>> quant_mapping);
  static PipelineQuantizationConfig from_json(const nlohmann::json& j, const std::string& source = "quant config");
  static PipelineQuantizationConfig from_file(const std::string& path);

  bool is_granular() const { return quant_mapping_.has_value(); }
  // What `component` gets: nullopt = not quantized (Diffusers' _resolve_quant_config).
  std::optional<ComponentQuantization> resolve(const std::string& component) const;
  // Names in components_to_quantize / quant_mapping that are not among `pipeline_components`
  // (Diffusers warns and ignores them); returns the warning text, empty when none.
  std::string unknown_components_warning(const std::vector<std::string>& pipeline_components) const;

  nlohmann::json to_json() const;

  // Diffusers' AUTO_QUANTIZATION_CONFIG_MAPPING keys, and the ones diffq implements.
  static const std::vector<std::string>& diffusers_backends();
  static const std::vector<std::string>& supported_backends();

 private:
  std::optional<std::string> quant_backend_;
  nlohmann::json quant_kwargs_;
  std::vector<std::string> components_to_quantize_;
  std::optional<std::map<std::string, ComponentQuantization>> quant_mapping_;
};

}  // namespace diffq
