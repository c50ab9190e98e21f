// The LoRA adapters of a DiffusionPipeline (include/diffq/pipeline.h's load_lora ... loras): one
// lora::LoraManager per place an adapter file can go, as Diffusers' _lora_loadable_modules. FLUX: "transformer"
// (the transformer and the CLIP text encoder, by the file's key prefixes); Wan: "transformer" and, for Wan2.2
// two-expert folders, "transformer_2" (WanLoraLoaderMixin's load_into_transformer_2: the same
// "transformer.*" keys, loaded into the low-noise expert). set_adapters / fuse / unfuse / unload act on every
// place; an adapter name may exist in several (the same weight then applies to each).
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "diffq/pipeline.h"
#include "lora/lora_manager.h"

namespace diffq {

class PipelineLoras {
 public:
  struct Place {
    std::string component;                   // "transformer", "transformer_2"
    std::map<std::string, Module*> modules;  // the file's key prefix -> module (null: not loaded)
    lora::LoraModelInfo info;
  };
  explicit PipelineLoras(std::vector<Place> places);

  // `component`: a Place's name ("" = the first place whose modules are not all null).
  std::string load(const std::filesystem::path& file, const std::string& name, double weight, bool lenient, bool hotswap,
                   const std::string& component);
  void set_adapters(const std::vector<std::string>& names, const std::vector<double>& weights);
  std::vector<std::string> fuse(double scale);
  void unfuse();
  void unload(const std::string& name);
  void mark_compiled();
  std::vector<DiffusionPipeline::LoraInfo> infos() const { return infos_; }
  bool fused() const;

 private:
  struct Entry {
    std::string component;
    std::unique_ptr<lora::LoraManager> manager;
    bool has(const std::string& name) const;
  };
  std::vector<Entry> places_;
  std::vector<DiffusionPipeline::LoraInfo> infos_;
};

}  // namespace diffq
