// How each component of a Diffusers pipeline folder is loaded, shared by every pipeline (FLUX, Wan):
// the compute dtype, and quantization — a component saved pre-quantized (a quantization_config in its
// config.json) loads in its packed layout whatever the pipeline-level config says; otherwise the
// pipeline-level PipelineQuantizationConfig decides (Diffusers' from_pretrained(quantization_config=...)).
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "io/diffusers_folder.h"
#include "modules/module.h"
#include "modules/state_dict.h"
#include "pipelines/pipeline_quantization_config.h"
#include "quant/quant_method.h"

namespace diffq {

class ComponentLoader {
 public:
  // Warns (stderr) about names in the quantization config that are not components of the folder.
  ComponentLoader(const io::DiffusersFolder& folder, std::optional<DType> dtype,
                  std::optional<PipelineQuantizationConfig> quantization_config, bool convert_pre_quantized = false);

  // LoadOptions for component `name`: dtype + quantization hooks. `from_folder` = false when the
  // component's weights come from elsewhere (a single-file transformer): its saved config is not read.
  // Records what was chosen in quantization / quant_methods.
  LoadOptions hooks_for(const std::string& name, bool from_folder = true);
  // After component `name` is loaded (call for every component hooks_for was asked about): with
  // convert_pre_quantized, the pre-quantized weights of a component the quantization config selects (a
  // folder component saved quantized, or a single file's GGUF / BFL weights) are converted to the
  // config's scheme (modules/convert_quantized.h) and the component's labels say "converted from ...".
  // `keep_in_fp32`: the model's keep-in-fp32 modules. A no-op otherwise.
  void finish(const std::string& name, Module& m, const std::vector<std::string>& keep_in_fp32 = {});

  const io::DiffusersFolder& folder;
  std::optional<DType> dtype;
  std::optional<PipelineQuantizationConfig> quantization_config;
  // Each quantized component's backend and scheme, e.g. {"transformer": "bitsandbytes_4bit nf4"}.
  std::map<std::string, std::string> quantization;
  std::map<std::string, std::shared_ptr<const quant::QuantMethod>> quant_methods;
  // Components whose pre-quantized weights were converted: the source's label ("modelopt MIXED_PRECISION",
  // "bfl_nvfp4 x40").
  std::map<std::string, std::string> converted_from;
  bool convert_pre_quantized = false;

 private:
  struct Conversion {
    std::shared_ptr<const quant::QuantMethod> target;
    std::shared_ptr<std::set<const QuantizedWeight*>> produced;  // quantized at load by the target
    std::string source;                                        // the saved config's label, "" for a single file
  };
  std::map<std::string, Conversion> conversions_;
};

// "gguf_q4_k x90, gguf_q8_0 x6" for the quantized parameters of m (empty when none), schemes sorted: the
// label of a single file that carries its own quantization (a GGUF transformer).
std::string quantized_schemes_summary(const Module& m);

}  // namespace diffq
