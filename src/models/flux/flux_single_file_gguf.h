// Single-file FLUX transformers in GGUF, BFL/ComfyUI naming (city96's FLUX.1-dev-gguf files, what
// Diffusers' FluxTransformer2DModel.from_single_file(..., quantization_config=GGUFQuantizationConfig())
// and ComfyUI-GGUF read), in both directions. The name mapping is flux_keys' table; the fused tensors
// (qkv, linear1) are split and fused on the quantized bytes (quant/gguf/gguf_packed.h), so quantized
// weights stay quantized (GGUFQuantizedWeight) and a loaded file writes back unchanged.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include "models/flux/flux_transformer.h"
#include "modules/state_dict.h"
#include "quant/gguf/gguf_quants.h"

namespace diffq::models::flux {

// Loads a BFL-named GGUF transformer (tensor names with or without "model.diffusion_model."). The
// config comes from the tensors' shapes plus `base` (as load_flux_single_file). Quantized 2-D tensors
// become GGUFQuantizedWeights with compute dtype opt.dtype (float32 when unset, as Diffusers'
// GGUFQuantizationConfig); F32/F16/BF16 tensors are dense (cast to opt.dtype, default float32);
// quantized 1-D tensors are dequantized. Errors name the file and tensor: not a BFL FLUX file, a
// missing or unknown tensor, an unsupported ggml type, a split inside a block.
std::unique_ptr<FluxTransformer2DModel> load_flux_gguf(const std::filesystem::path& file,
                                                       const FluxTransformerConfig& base, const LoadOptions& opt = {});

// The ggml type a BFL tensor is written as when the file's type is `type` (city96's convention):
// 1-D tensors (biases, norm scales) and tensors of <= 1024 elements F32; 2-D tensors whose rows are not
// a whole number of `type` blocks F16; every other tensor `type`.
quant::gguf::GGMLType flux_gguf_tensor_type(const Shape& shape, quant::gguf::GGMLType type);

struct FluxGGUFWriteReport {
  std::map<std::string, int64_t> tensors_per_type;  // "Q8_0" -> count
  int64_t tensors = 0;
  uint64_t file_bytes = 0;
};

// Writes `model` as one BFL-named GGUF file (no prefix, general.architecture "flux"), atomically
// (temporary file + rename). Each tensor's type follows flux_gguf_tensor_type; a weight that is already
// a GGUFQuantizedWeight of that type keeps its bytes, any other weight goes through its float32 dense
// equivalent (quant/dense_equivalent.h; a packed Nunchaku bias un-permuted) and
// quantized with ggml's reference quantizer. Fused tensors are the parts' bytes concatenated.
FluxGGUFWriteReport save_flux_gguf(const FluxTransformer2DModel& model, const std::filesystem::path& path,
                                   quant::gguf::GGMLType type, const std::string& name = "flux");

}  // namespace diffq::models::flux
