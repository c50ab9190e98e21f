// Single-file FLUX checkpoints in BFL / ComfyUI naming ("double_blocks.0.img_attn.qkv.weight", often
// under "model.diffusion_model.") -> Diffusers' FluxTransformer2DModel keys (diffusers-spec.md §B.4).
#pragma once

#include "models/flux/flux_transformer.h"
#include "modules/state_dict.h"

namespace diffq::models::flux {

// The ComfyUI/original prefix; only keys under it are the transformer's when any key carries it.
inline constexpr const char* kBflPrefix = "model.diffusion_model.";

// True when `sd` holds a BFL-named FLUX transformer (double_blocks.0.img_attn.norm.key_norm.scale,
// with or without the prefix).
bool is_bfl_flux_state_dict(const StateDict& sd);

// The config a BFL-named checkpoint implies: layer counts and widths from the tensors' shapes,
// guidance_embeds from guidance_in; patch_size and axes_dims_rope come from `base` (not in the weights).
FluxTransformerConfig infer_bfl_flux_config(const StateDict& sd, FluxTransformerConfig base = {});

// Renames every transformer key to Diffusers' naming. qkv / linear1 row splits are views (no copy);
// final_layer.adaLN_modulation.1 (BFL: shift, scale) becomes norm_out.linear with its halves swapped
// (Diffusers: scale, shift), which copies. Unknown keys under the transformer are an error.
StateDict convert_bfl_flux_to_diffusers(const StateDict& sd, const FluxTransformerConfig& cfg);

}  // namespace diffq::models::flux
