// LoRA adapters on a pipeline's components, as Diffusers' LoraLoaderMixin + PEFT: load_lora_weights (any format
// lora_file.h reads), set_adapters(names, weights), fuse_lora(scale) / unfuse_lora(), unload_lora_weights, and
// hotswap (new weights for a loaded adapter name, in place: compiled graphs read adapters at run time).
//
// Where things live: an adapter's A/B are float32 host tensors owned here (LoraLinear slots on each target
// Linear), cast/copied to the compute dtype and device at first use and kept there: they stay resident and do
// not travel with group offloading (they are small: rank * (in + out) per layer).
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "lora/lora_file.h"
#include "lora/lora_linear.h"
#include "modules/module.h"

namespace diffq::lora {

struct LoadOptions {
  bool lenient = false;  // unknown / mismatched keys: a warning (stderr) instead of an Error
  bool hotswap = false;  // replace the weights of an already loaded adapter of the same name
};

class LoraManager {
 public:
  // components: "transformer", "text_encoder" (FLUX's CLIP), ... -> module (null ones are skipped).
  LoraManager(std::map<std::string, Module*> components, LoraModelInfo info);

  // Returns the adapter's name ("default_N" when `name` is empty). The new adapter is active with `weight`.
  std::string load(const std::filesystem::path& file, const std::string& name = "", double weight = 1.0,
                   const LoadOptions& o = {});
  std::string load(const LoraStateDict& sd, const std::string& name, double weight, const LoadOptions& o,
                   const std::string& file = "<state dict>");
  void set_adapters(const std::vector<std::string>& names, const std::vector<double>& weights = {});
  // Merges the active adapters (times `scale`) into every dense target weight; quantized targets keep running
  // unfused (listed in the return value). Refused while offload hooks are attached (fuse before offloading).
  std::vector<std::string> fuse(double scale = 1.0);
  void unfuse();
  void unload(const std::string& name = "");  // "" = all
  std::vector<std::string> adapters() const { return order_; }
  bool fused() const { return fused_; }
  // After compile: a LoRA on a Linear that had no adapter slot when the graph was captured needs a recompile
  // (Error naming the layers); adapters on layers that had one swap freely.
  void mark_compiled() { compiled_ = true; }
  const std::vector<std::string>& warnings() const { return warnings_; }

 private:
  struct Target {
    Linear* linear;
    std::string path;  // "transformer.transformer_blocks.0.attn.to_q"
  };
  LoraLinear& slot_holder(Linear& lin);
  std::map<std::string, Module*> components_;
  LoraModelInfo info_;
  std::vector<std::string> order_;  // loaded adapter names
  std::map<std::string, std::vector<Linear*>> targets_;
  bool fused_ = false, compiled_ = false;
  std::vector<std::string> warnings_;
};

}  // namespace diffq::lora
