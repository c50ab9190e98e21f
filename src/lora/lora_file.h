// A LoRA file as Diffusers' FluxLoraLoaderMixin / WanLoraLoaderMixin.lora_state_dict reads it: the format is
// told from the keys, and every format is converted to Diffusers/PEFT names ("transformer.<module>.lora_A.weight",
// "transformer.<module>.lora_B.weight", "text_encoder.<module>...") by Diffusers' rules (lora_kohya.cpp,
// lora_xlabs.cpp), key for key. Alphas stay apart (network_alphas) or are folded into the weights, as there.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "diffq/tensor.h"

namespace diffq::lora {

enum class LoraFormat {
  diffusers,  // transformer.*.lora_A/lora_B (PEFT), alphas from "lora_adapter_metadata" or *.alpha keys
  kohya,      // sd-scripts: lora_unet_* / lora_te1_* with lora_down / lora_up / alpha
  comfyui,    // diffusion_model.* / text_encoders.clip_l.transformer.* with lora_down / lora_up / alpha (FLUX);
              // Wan's original naming diffusion_model.blocks.N.self_attn.q.lora_down / lora_A ... (Wan)
  xlabs,      // double_blocks.N.processor.{qkv,proj}_lora{1,2}.{down,up}.weight
};
const char* format_name(LoraFormat f);

// What the FLUX conversions need of the model: the sizes of single_blocks.N.linear1's fused output
// (q, k, v, mlp); Diffusers hard-codes FLUX.1's [3072, 3072, 3072, 12288].
struct LoraModelInfo {
  std::vector<int64_t> single_linear1_dims;  // empty: FLUX.1's
  std::string family = "flux";               // "flux" or "wan": which non-Diffusers namings apply
  bool lenient = false;                      // keys no rule converts become notes instead of an Error
};

struct LoraStateDict {
  LoraFormat format = LoraFormat::diffusers;
  std::map<std::string, Tensor> tensors;            // Diffusers names -> float32 host tensors
  std::map<std::string, double> network_alphas;     // "transformer.<module>.alpha" -> alpha (Diffusers format only)
  nlohmann::json adapter_metadata;                  // "lora_adapter_metadata" of the header (flat), or null
  std::vector<std::string> notes;                   // what the conversion dropped or changed, for the user
};

// Reads and converts a .safetensors LoRA. Throws naming the file and the keys for formats Diffusers does not
// load into FLUX.1 / Wan (LoKr, LoHa, BFL control LoRAs, DoRA scales are dropped with a note as Diffusers does).
LoraStateDict read_lora_file(const std::filesystem::path& path, const LoraModelInfo& info = {});

// The conversions alone (for tests: Diffusers' lora_state_dict key for key). `sd` is consumed.
LoraStateDict convert_lora_state_dict(std::map<std::string, Tensor> sd, const LoraModelInfo& info,
                                      const std::string& file);

// lora_kohya.cpp / lora_xlabs.cpp
std::map<std::string, Tensor> convert_kohya_flux(std::map<std::string, Tensor> sd, const LoraModelInfo& info,
                                                 std::vector<std::string>& notes, const std::string& file);
std::map<std::string, Tensor> convert_xlabs_flux(std::map<std::string, Tensor> sd, const std::string& file);
// lora_wan.cpp: original Wan / ComfyUI naming (diffusion_model.blocks.N.self_attn.q.lora_down.weight ...).
std::map<std::string, Tensor> convert_wan_original(std::map<std::string, Tensor> sd, std::vector<std::string>& notes,
                                                   const std::string& file);

}  // namespace diffq::lora
