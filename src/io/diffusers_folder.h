// A Diffusers pipeline folder (what DiffusionPipeline.save_pretrained writes / the Hub serves):
// model_index.json naming the pipeline class and its components, one subfolder per component with its
// config and weights (diffusers models: diffusion_pytorch_model*.safetensors; transformers models:
// model*.safetensors; either may instead be a PyTorch checkpoint, diffusion_pytorch_model*.bin /
// pytorch_model*.bin, used only when no safetensors file of that variant exists; schedulers: scheduler_config.json; tokenizers: their own files, no weights).
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "io/json_config.h"
#include "io/safetensors.h"

namespace diffq::io {

// The files holding one variant of a component's weights.
struct WeightFiles {
  std::string variant;                         // "" = the default (no variant)
  std::optional<std::filesystem::path> index;  // *.{safetensors,bin}.index[.<variant>].json when sharded
  std::vector<std::filesystem::path> files;    // the shards (sorted), or the single file
};

struct Component {
  std::string name;        // key in model_index.json = subfolder name
  std::string library;     // "diffusers", "transformers", ...
  std::string class_name;  // "FluxTransformer2DModel", "CLIPTokenizer", ...
  std::filesystem::path dir;
  std::filesystem::path config_path;  // config.json / scheduler_config.json; empty when none
  JsonConfig config;                  // {} when there is no config file
  std::vector<std::string> variants;  // weight variants present ("" = default), sorted; empty: none
  bool has_weights() const { return !variants.empty(); }
  const nlohmann::json* quantization_config() const;  // config["quantization_config"] or nullptr
};

// Weight discovery in one model folder (also usable on a lone model folder, without model_index.json).
std::vector<std::string> find_weight_variants(const std::filesystem::path& dir);
// Throws naming the folder and the variants present when `variant` is not there.
WeightFiles find_weight_files(const std::filesystem::path& dir, std::string_view variant = "");
// name -> tensor (zero-copy) from safetensors files or PyTorch .bin checkpoints (torchao subclasses
// flattened as torch_checkpoint.h describes).
StateDict load_weight_files(const WeightFiles& files);
// The files' metadata: the safetensors headers' __metadata__ (merged), or for .bin checkpoints the
// torchao metadata of their flattened tensor subclasses.
Metadata load_weight_metadata(const WeightFiles& files);

class DiffusersFolder {
 public:
  // Reads model_index.json and every listed component's config; checks each component folder exists.
  static DiffusersFolder open(const std::filesystem::path& root);

  const std::filesystem::path& root() const { return root_; }
  const JsonConfig& model_index() const { return model_index_; }
  const std::string& pipeline_class() const { return pipeline_class_; }    // _class_name
  const std::string& diffusers_version() const { return diffusers_version_; }
  // Plain settings of model_index.json (not components, not "_"-prefixed), e.g. boundary_ratio.
  const nlohmann::json& settings() const { return settings_; }
  const std::vector<Component>& components() const { return components_; }  // model_index order
  const std::vector<std::string>& skipped_components() const { return skipped_; }  // [null, null]
  bool has_component(std::string_view name) const;
  const Component& component(std::string_view name) const;  // throws listing the components

  WeightFiles weight_files(std::string_view component, std::string_view variant = "") const;
  // name -> tensor (zero-copy views of the mmapped files) for one component and variant.
  StateDict load_state_dict(std::string_view component, std::string_view variant = "") const;

 private:
  std::filesystem::path root_;
  JsonConfig model_index_;
  std::string pipeline_class_, diffusers_version_;
  nlohmann::json settings_ = nlohmann::json::object();
  std::vector<Component> components_;
  std::vector<std::string> skipped_;
};

}  // namespace diffq::io
