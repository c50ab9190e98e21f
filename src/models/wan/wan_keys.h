// Single-file Wan transformers: the original Wan / ComfyUI naming ("blocks.0.self_attn.q.weight",
// "head.modulation", often under "model.diffusion_model.") -> Diffusers' WanTransformer3DModel keys, as
// Diffusers 0.42.1's convert_wan_transformer_to_diffusers renames them; which kind of Wan checkpoint a
// set of tensors is (text-to-video, or a model diffq does not run: I2V / FLF2V, VACE, Animate, FLUX);
// and the WanTransformerConfig the tensors' shapes imply.
//
// Works on names and shapes only, so dense state dicts (safetensors) and GGUF files share it.
#pragma once

#include <map>
#include <optional>
#include <string>

#include "models/wan/wan_transformer.h"
#include "modules/state_dict.h"

namespace diffq::models::wan {

// ComfyUI's prefix; when any tensor carries it, only the tensors under it are the transformer's.
inline constexpr const char* kWanComfyPrefix = "model.diffusion_model.";

// Tensor name -> shape (torch order).
using WanShapeMap = std::map<std::string, Shape>;
WanShapeMap wan_shapes_of(const StateDict& sd);

enum class WanNaming {
  original,   // Wan's own / ComfyUI names (blocks.N.self_attn.q, head.head, head.modulation, ...)
  diffusers,  // WanTransformer3DModel's names (blocks.N.attn1.to_q, proj_out, scale_shift_table, ...)
};

struct WanCheckpointKind {
  WanNaming naming = WanNaming::original;
  std::string prefix;  // "model.diffusion_model." or ""
};

// Classifies the tensors of `source` (a file name, for messages). Throws, naming `source` and the key
// that tells, when they are not a text-to-video Wan transformer: a FLUX transformer; a Wan VACE or
// Animate transformer; a Wan2.1 I2V / FLF2V transformer (image embedder img_emb.* / cross_attn.k_img,
// Diffusers: condition_embedder.image_embedder / attn2.add_k_proj); a Wan2.2 I2V transformer
// (patch_embedding takes more input channels than head.head gives back: the image latent is
// concatenated); or no Wan transformer at all (Diffusers' detection key head.modulation, or
// condition_embedder.time_proj.weight, missing).
WanCheckpointKind classify_wan_checkpoint(const WanShapeMap& shapes, const std::string& source);

// The Diffusers name of one original-named tensor (without the prefix), or nullopt when it is not a
// tensor of a text-to-video Wan transformer. Renames as Diffusers' converter does: self_attn -> attn1,
// cross_attn -> attn2, .q/.k/.v/.o -> .to_q/.to_k/.to_v/.to_out.0, norm3 (the cross-attention norm)
// -> norm2, ffn.0/ffn.2 -> ffn.net.0.proj/ffn.net.2, modulation -> scale_shift_table, head.head ->
// proj_out, head.modulation -> scale_shift_table, text_embedding.0/2, time_embedding.0/2,
// time_projection.1 -> condition_embedder.*.
std::optional<std::string> wan_original_to_diffusers_name(const std::string& original);

// The Diffusers-named shapes of `shapes` (prefix stripped, renamed when original-named). Unknown
// tensors are an error listing them (up to 8).
WanShapeMap wan_diffusers_shapes(const WanShapeMap& shapes, const WanCheckpointKind& kind, const std::string& source);

// The config Diffusers-named shapes imply: inner dim, in_channels and patch_size from
// patch_embedding.weight [D, C, pt, ph, pw]; out_channels from proj_out; text_dim, freq_dim, ffn_dim,
// num_layers, cross_attn_norm (blocks.0.norm2.weight) from their tensors. The head split is not in the
// weights: attention_head_dim is 128 (every released Wan model: 1.3B 12 x 128, 14B 40 x 128, TI2V-5B
// 24 x 128) unless `base` gives it. With `base` (the pipeline folder's transformer/config.json) its
// values are used and every shape-determined field must agree with the tensors (an error names the
// field, both values and `source`).
WanTransformerConfig infer_wan_config_from_shapes(const WanShapeMap& diffusers_shapes,
                                                  const std::optional<WanTransformerConfig>& base,
                                                  const std::string& source);

}  // namespace diffq::models::wan
