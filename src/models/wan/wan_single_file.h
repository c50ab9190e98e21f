// A Wan transformer from the one file users download, as Diffusers' WanTransformer3DModel.from_single_file:
// - .safetensors in the original Wan / ComfyUI naming (Comfy-Org's wan2.1_t2v_1.3B_fp16.safetensors,
//   keys blocks.0.self_attn.q.weight, head.modulation, ... possibly under "model.diffusion_model."),
//   converted to Diffusers' names (wan_keys.h), or already in Diffusers' naming (used as is);
// - .gguf in city96's layout (Wan2.1-T2V-14B-Q4_K_M.gguf, wan2.2_ti2v_5B-Q8_0.gguf: original naming,
//   ggml types mixed per tensor), quantized weights kept quantized (wan_single_file_gguf.h).
// The file holds no config: it is inferred from the tensors' shapes, or taken from `base` (the pipeline
// folder's transformer/config.json) and checked against them (infer_wan_config_from_shapes).
// Only text-to-video transformers load (Wan2.1 T2V 1.3B / 14B, the Wan2.2 T2V-A14B experts, Wan2.2
// TI2V-5B); I2V / FLF2V, VACE, Animate and non-Wan files are an error naming the file and the reason.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "models/wan/wan_transformer.h"
#include "modules/state_dict.h"

namespace diffq::models::wan {

// Diffusers-named state dict from a Wan single file (original/ComfyUI naming converted as Diffusers does,
// or already Diffusers). Tensors are shared, not copied. `source` names the file in errors.
StateDict wan_single_file_state_dict(const StateDict& sd, const std::string& source = "state dict");

// The transformer config inferred from the tensors (as Diffusers infers it), overridden by `base` where
// the folder gives one (the tensors must then agree with it).
WanTransformerConfig infer_wan_config(const StateDict& sd, const std::optional<WanTransformerConfig>& base,
                                      const std::string& source = "state dict");

// .safetensors or .gguf; LoadOptions as from_pretrained (dtype, keep-in-fp32, quantization hooks);
// GGUF weights stay quantized.
std::unique_ptr<WanTransformer3DModel> load_wan_single_file(const std::filesystem::path& file,
                                                            const std::optional<WanTransformerConfig>& base,
                                                            const LoadOptions& opt = {});

}  // namespace diffq::models::wan
