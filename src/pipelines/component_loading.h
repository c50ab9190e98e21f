// How each component of a Diffusers pipeline folder is loaded, shared by every pipeline (FLUX, Wan):
// the compute dtype, and quantization — a component saved pre-quantized (a quantization_config in its
// config.json) loads in its packed layout whatever the pipeline-level config says; otherwise the
// pipeline-level PipelineQuantizationConfig decides (Diffusers' from_pretrained(quantization_config=...)).
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "io/diffusers_folder.h"
#include "modules/state_dict.h"
#include "pipelines/pipeline_quantization_config.h"
#include "quant/quant_method.h"

namespace diffq {

class ComponentLoader {
 public:
  // Warns (stderr) about names in the quantization config that are not components of the folder.
  ComponentLoader(const io::DiffusersFolder& folder, std::optional<DType> dtype,
                  std::optional<PipelineQuantizationConfig> quantization_config);

  // LoadOptions for component `name`: dtype + quantization hooks. `from_folder` = false when the
  // component's weights come from elsewhere (a single-file transformer): its saved config is not read.
  // Records what was chosen in quantization / quant_methods.
  LoadOptions hooks_for(const std::string& name, bool from_folder = true);

  const io::DiffusersFolder& folder;
  std::optional<DType> dtype;
  std::optional<PipelineQuantizationConfig> quantization_config;
  // Each quantized component's backend and scheme, e.g. {"transformer": "bitsandbytes_4bit nf4"}.
  std::map<std::string, std::string> quantization;
  std::map<std::string, std::shared_ptr<const quant::QuantMethod>> quant_methods;
};

// "gguf_q4_k x90, gguf_q8_0 x6" for the quantized parameters of m (empty when none), schemes sorted: the
// label of a single file that carries its own quantization (a GGUF transformer).
std::string quantized_schemes_summary(const Module& m);

}  // namespace diffq
