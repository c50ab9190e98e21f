// One adapter's weights per target Linear, from a converted LoRA state dict (lora_file.h): the Diffusers names
// mapped onto the pipeline's components, each target's A [r, in], B [out, r] and PEFT scaling (lora_alpha / r,
// from the file's lora_adapter_metadata (LoraConfig: r, lora_alpha, rank_pattern, alpha_pattern, use_rslora) or
// the network alphas, as Diffusers' get_peft_kwargs derives them; 1 when neither). Keys that match no Linear,
// or whose shapes do not fit it, are an Error listing them all (a warning each when lenient).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "lora/lora_file.h"
#include "modules/layers.h"

namespace diffq::lora {

struct AdapterTarget {
  std::string path;  // "transformer.transformer_blocks.0.attn.to_q"
  Linear* linear = nullptr;
  Tensor A, B;       // [r, in], [out, r] float32
  Tensor bias;       // [out] float32: PEFT's lora_bias (lora_B.bias; Wan's .diff_b), or undefined
  double scaling = 1.0;
};

std::vector<AdapterTarget> build_adapter(const LoraStateDict& sd, const std::map<std::string, Module*>& components,
                                         bool lenient, std::vector<std::string>& warnings, const std::string& file);

}  // namespace diffq::lora
