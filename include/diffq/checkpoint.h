// Checkpoints on disk: describing one (`diffq inspect`) and writing quantized ones (`diffq quantize`).
//
//   std::string text = diffq::inspect_text("FLUX.1-dev/transformer/diffusion_pytorch_model.safetensors");
//
//   auto pipe = diffq::DiffusionPipeline::from_pretrained("FLUX.1-dev", {.dtype = diffq::DType::bf16,
//       .quantization_config_json = diffq::quantization_config_from_shorthand("nf4", diffq::DType::bf16)});
//   diffq::save_quantized(*pipe, "FLUX.1-dev-nf4");            // loads later without quantization options
//
//   auto t = diffq::DiffusionPipeline::from_pretrained("FLUX.1-dev", {.load_text_encoders = false});
//   diffq::save_transformer_gguf(*t, "flux1-dev-Q4_K.gguf", "q4_K");
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "diffq/pipeline.h"

namespace diffq {

// ---- describing a checkpoint ----
// A Diffusers pipeline folder (its components), a model folder, a .safetensors file, a sharded
// *.safetensors.index.json or a .gguf file: its tensors, dtypes / ggml types, shapes, parameter counts and
// quantization. As JSON (`indent` spaces; -1: one line) or as the text `diffq inspect` prints; both say the same.
std::string inspect_json(const std::filesystem::path& path, int indent = 1);
std::string inspect_text(const std::filesystem::path& path);

// "4.0 GiB", "12 MiB", "17 B": the size figures diffq prints.
std::string format_bytes(int64_t bytes);

// ---- writing quantized checkpoints ----
struct SavedPipeline {
  std::map<std::string, int64_t> component_bytes;  // bytes of each written weight file, by component
};
// Writes `pipe` (loaded from a Diffusers folder with a quantization config) as a new Diffusers folder: every
// quantized component in its backend's layout with its quantization_config in config.json (what Diffusers'
// save_pretrained writes), the rest copied from the source folder. Atomic: an error leaves nothing behind.
// FluxPipeline folders so far; throws for others and for builtin pipelines.
SavedPipeline save_quantized(const DiffusionPipeline& pipe, const std::filesystem::path& out_folder);

// The GGUF types save_transformer_gguf writes ("F32, F16, BF16, Q4_0, ..."), and the canonical name of
// one of them ("q4_k" -> "Q4_K"); empty when `type` is not one.
std::string gguf_write_types();
std::string gguf_type_name(const std::string& type);

struct SavedGguf {
  std::string type;                                 // the file's type, canonical ("Q8_0")
  int64_t tensors = 0;
  std::map<std::string, int64_t> tensors_per_type;  // "Q8_0" -> count (small and 1-D tensors stay F32/F16)
  int64_t file_bytes = 0;
};
// The pipeline's transformer as one BFL-named GGUF file of `type` (city96's FLUX.1-dev-gguf convention),
// written atomically; `name` is general.name. FluxPipeline so far.
SavedGguf save_transformer_gguf(const DiffusionPipeline& pipe, const std::filesystem::path& file,
                                const std::string& type, const std::string& name = "flux");

// Each quantized Linear weight of `quantized` against the same weight of `reference` (the same folder
// loaded without quantization): 10 log10(sum w^2 / sum (w - dequantize(q))^2) in dB, per component in
// the pipeline's component order (FLUX: transformer, text_encoder, text_encoder_2, vae).
struct WeightSqnr {
  std::string component;  // "transformer"
  std::string layer;      // "transformer_blocks.0.attn.to_q.weight"
  std::string scheme;     // the quantized weight's scheme
  double sqnr_db = 0;
};
std::vector<WeightSqnr> quantization_sqnr(const DiffusionPipeline& quantized, const DiffusionPipeline& reference);

}  // namespace diffq
