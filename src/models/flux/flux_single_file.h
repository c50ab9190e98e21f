// A FLUX transformer from one .safetensors, PyTorch .bin / .pt / .pth (torch.save of the state dict, read
// by io/torch_checkpoint.h) or .gguf file (GGUF: flux_single_file_gguf.h), as Diffusers'
// FluxTransformer2DModel.from_single_file:
// BFL/ComfyUI naming (converted, §B.4) or Diffusers naming (used as is). The file holds no config:
// layer counts and widths come from the tensors' shapes, the rest (patch_size, axes_dims_rope) from
// `base` — the pipeline folder's transformer/config.json when there is one, else FLUX.1's defaults.
#pragma once

#include <filesystem>
#include <memory>

#include "models/flux/flux_transformer.h"
#include "modules/state_dict.h"

namespace diffq::models::flux {

std::unique_ptr<FluxTransformer2DModel> load_flux_single_file(const std::filesystem::path& file,
                                                              const FluxTransformerConfig& base,
                                                              const LoadOptions& opt = {});

}  // namespace diffq::models::flux
