// Single-file Wan transformers in GGUF, city96's layout (city96/Wan2.1-T2V-14B-gguf, QuantStack's
// Wan2.2 files): original Wan naming (with or without "model.diffusion_model."), ggml types mixed per
// tensor, patch_embedding.weight as a 5-D F32/F16 tensor, modulation tensors F32. What Diffusers'
// WanTransformer3DModel.from_single_file(..., quantization_config=GGUFQuantizationConfig()) and
// ComfyUI-GGUF read.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>

#include "models/wan/wan_transformer.h"
#include "modules/state_dict.h"

namespace diffq::models::wan {

// Quantized 2-D tensors (the Linear weights) become GGUFQuantizedWeights sharing the file's bytes, with
// compute dtype opt.dtype (float32 when unset, as Diffusers' GGUFQuantizationConfig); F32/F16/BF16
// tensors are dense (cast to opt.dtype, default float32, Diffusers' _keep_in_fp32_modules kept float32);
// quantized tensors of other ranks, and those of Diffusers' _keep_in_fp32_modules (time_embedder), are
// dequantized (f32, bit-exact with gguf-py), as Diffusers' GGUF quantizer does at load. ComfyUI's "comfy.gguf.orig_shape.<name>" metadata
// reshapes a dense tensor; a modulation stored without its leading 1 ([6, D], llama.cpp drops it) gets
// it back. Errors name the file and tensor.
std::unique_ptr<WanTransformer3DModel> load_wan_gguf(const std::filesystem::path& file,
                                                     const std::optional<WanTransformerConfig>& base,
                                                     const LoadOptions& opt = {});

}  // namespace diffq::models::wan
