// Single-file FLUX checkpoints in BFL / ComfyUI naming ("double_blocks.0.img_attn.qkv.weight", often
// under "model.diffusion_model.") -> Diffusers' FluxTransformer2DModel keys (diffusers-spec.md §B.4).
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "models/flux/flux_transformer.h"
#include "modules/state_dict.h"

namespace diffq::models::flux {

// The ComfyUI/original prefix; only keys under it are the transformer's when any key carries it.
inline constexpr const char* kBflPrefix = "model.diffusion_model.";

// One BFL tensor and the Diffusers tensor(s) it becomes: the single mapping table, used to convert dense
// state dicts (below), GGUF files (flux_single_file_gguf.h, on the quantized bytes) and, read backwards,
// to write BFL-named GGUF files.
struct BflTensorMap {
  enum class Kind {
    same,         // renamed only
    split_rows,   // rows split in order into `parts` (fused qkv, single-block linear1)
    swap_halves,  // BFL (shift, scale) -> Diffusers (scale, shift) along rows (final_layer.adaLN_modulation.1)
  };
  std::string bfl;  // without the "model.diffusion_model." prefix, e.g. "double_blocks.0.img_attn.qkv.weight"
  Kind kind = Kind::same;
  std::vector<std::pair<std::string, int64_t>> parts;  // Diffusers keys; rows of each for split_rows (else 0)
};
// Every tensor of a BFL FLUX transformer with config `cfg`, in a fixed order (guidance_in only when
// cfg.guidance_embeds).
std::vector<BflTensorMap> bfl_flux_tensor_map(const FluxTransformerConfig& cfg);

// Tensor name -> shape (torch order), for sources that are not dense state dicts (GGUF files).
using ShapeMap = std::map<std::string, Shape>;

// True when `sd` holds a BFL-named FLUX transformer (double_blocks.0.img_attn.norm.key_norm.scale,
// with or without the prefix).
bool is_bfl_flux_state_dict(const StateDict& sd);

// The config a BFL-named checkpoint implies: layer counts and widths from the tensors' shapes,
// guidance_embeds from guidance_in; patch_size and axes_dims_rope come from `base` (not in the weights).
FluxTransformerConfig infer_bfl_flux_config(const StateDict& sd, FluxTransformerConfig base = {});
FluxTransformerConfig infer_bfl_flux_config(const ShapeMap& shapes, FluxTransformerConfig base = {});
bool is_bfl_flux_checkpoint(const ShapeMap& shapes);

// Renames every transformer key to Diffusers' naming. qkv / linear1 row splits are views (no copy);
// final_layer.adaLN_modulation.1 (BFL: shift, scale) becomes norm_out.linear with its halves swapped
// (Diffusers: scale, shift), which copies. Unknown keys under the transformer are an error.
StateDict convert_bfl_flux_to_diffusers(const StateDict& sd, const FluxTransformerConfig& cfg);

}  // namespace diffq::models::flux
