// FluxPipeline (Diffusers 0.42.1, pipelines/flux/pipeline_flux.py) on pre-computed prompt embeddings.
//
// What __call__ does, in the same order and dtypes:
// - prompts: `prompt` (and prompt_2, negative_prompt, negative_prompt_2) are encoded as encode_prompt
//   does, each row repeated num_images_per_prompt times (p0, p0, p1, p1, ...); embeddings passed
//   directly are used as given (not repeated), as in Diffusers. The negative prompt is encoded only
//   when true CFG is on (true_cfg_scale > 1); one negative prompt serves every prompt.
// - height/width: Diffusers warns when they are not multiples of vae_scale_factor * 2 (16 for FLUX.1)
//   and silently floors the size; diffq refuses them with an error naming the nearest valid sizes.
// - latents dtype = prompt_embeds' dtype. Noise = randn_tensor([B, in_channels / 4, h, w], seed) in that
//   dtype, packed to [B, (h/2)(w/2), in_channels]; injected latents are already packed (as Diffusers').
// - sigmas = linspace(1, 1/N, N) unless given, mu = calculate_shift(seq_len, scheduler config),
//   set_timesteps (custom sigmas: set_timesteps(sigmas=..., mu=...), N = len(sigmas)).
// - guidance = float32 full(guidance_scale) [B], only when the transformer has guidance_embeds.
// - per step: timestep = t.to(latents dtype) / 1000 in that dtype; v = transformer(...); with true CFG
//   (true_cfg_scale > 1 and negative embeddings) v = v_neg + s * (v - v_neg); Euler step (fp32 math).
// - output "latent": the packed latents; "image": unpack, / scaling_factor + shift_factor, vae.decode,
//   clamp(x / 2 + 0.5, 0, 1) -> [B, H, W, 3] float32 and round(x * 255) -> uint8.
//
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "diffq/cache.h"
#include "diffq/tensor.h"
#include "models/clip/clip_text_model.h"
#include "models/flux/flux_transformer.h"
#include "models/t5/t5_encoder.h"
#include "models/vae/autoencoder_kl.h"
#include "pipelines/pipeline_quantization_config.h"
#include "quant/quant_method.h"
#include "offload/pipeline_offloader.h"
#include "schedulers/flow_match_euler.h"
#include "tokenizers/clip_tokenizer.h"
#include "tokenizers/t5_tokenizer.h"

namespace diffq {

struct FluxPromptEmbeds {
  Tensor prompt_embeds;         // [B, T, joint_attention_dim]
  Tensor pooled_prompt_embeds;  // [B, pooled_projection_dim]
};

// Per-step callback: (step index, total steps, scheduler timestep t in [0, 1000]); false interrupts
// the loop (Diffusers' `interrupt`: the remaining steps are skipped, the output is still produced).
using FluxStepCallback = std::function<bool(int64_t step, int64_t total, float timestep)>;

// The tensors of one denoising step (for tests and debugging; what the fixtures store per step).
struct FluxStepTensors {
  int64_t step = 0;
  Tensor latents_in;   // packed
  Tensor timestep;     // [B], t / 1000 in the latents' dtype (what the transformer gets)
  Tensor noise_pred;   // after true CFG
  Tensor latents_out;  // after the Euler step
};

struct FluxCallOptions {
  // Text prompts (one image row each, times num_images_per_prompt) ...
  std::vector<std::string> prompt;             // needs the tokenizers and text encoders
  std::vector<std::string> prompt_2;           // T5 prompt per row (default: prompt)
  std::vector<std::string> negative_prompt;    // 1 (shared) or one per prompt; used when true_cfg_scale > 1
  std::vector<std::string> negative_prompt_2;  // T5 negative (default: negative_prompt)
  int64_t num_images_per_prompt = 1;
  int64_t max_sequence_length = 512;           // T5 tokens, at most 512
  // ... or pre-computed embeddings (exactly one of the two).
  Tensor prompt_embeds;
  Tensor pooled_prompt_embeds;
  Tensor negative_prompt_embeds;         // optional (true CFG)
  Tensor negative_pooled_prompt_embeds;  // optional (true CFG)
  double true_cfg_scale = 1.0;
  int64_t height = 1024, width = 1024;
  int64_t num_inference_steps = 28;
  // Custom sigmas (Diffusers' `sigmas`): replace linspace(1, 1/N, N) and then set the step count
  // (num_inference_steps is ignored, as in Diffusers); still shifted by mu like the default schedule.
  std::optional<std::vector<double>> sigmas;
  double guidance_scale = 3.5;
  uint64_t seed = 0;     // torch.Generator("cpu").manual_seed(seed)
  Tensor latents;        // optional packed [B, seq_len, in_channels]; replaces the noise
  std::string output_type = "image";  // "image" or "latent"
  FluxStepCallback callback;          // optional
  std::function<void(const FluxStepTensors&)> step_observer;  // optional, called before `callback`
};

struct FluxOutput {
  Tensor latents;      // packed final latents [B, seq_len, in_channels] (always set)
  Tensor image_f32;    // [B, H, W, 3] in [0, 1] (output_type "image")
  Tensor image_u8;     // [B, H, W, 3] uint8 (output_type "image")
  int64_t steps_run = 0;
  bool interrupted = false;
  double encode_prompt_s = 0, denoise_s = 0, decode_s = 0;  // wall time of each stage
  CacheReport cache;  // steps computed vs skipped (when transformer->enable_cache was called)
};

struct FluxPipelineLoadOptions {
  bool load_text_encoders = true;  // CLIP (text_encoder) and T5 (text_encoder_2) when present
  // A single-file transformer (.safetensors in BFL/ComfyUI or Diffusers naming, or a BFL-named .gguf)
  // replacing the folder's transformer component; its config is inferred from the weights, the rest
  // from the folder's transformer/config.json when present (Diffusers' from_single_file(..., config=folder)).
  std::filesystem::path transformer_file = {};
  // Pipeline-level quantization (Diffusers' from_pretrained(quantization_config=...)): the components
  // it names are quantized while loading. Components saved pre-quantized (a quantization_config in
  // their config.json) load in their packed layout whatever this says.
  std::optional<PipelineQuantizationConfig> quantization_config = {};
  // Components saved pre-quantized (and a pre-quantized single-file transformer) that quantization_config
  // selects are converted to its scheme instead of loading as saved (`diffq quantize`; ComponentLoader::finish).
  bool convert_pre_quantized = false;
};

class FluxPipeline {
 public:
  // Loads transformer, vae, scheduler (and the text encoders) of a Diffusers FluxPipeline folder;
  // dtype: compute dtype of every model (nullopt keeps each file's dtype).
  static std::unique_ptr<FluxPipeline> from_pretrained(const std::filesystem::path& folder,
                                                       std::optional<DType> dtype = std::nullopt,
                                                       const FluxPipelineLoadOptions& opt = {});

  FluxOutput operator()(const FluxCallOptions& opt);

  // Runs the text encoders on token ids: clip_ids [B, 77] i64 -> pooled, t5_ids [B, S] i64 ->
  // prompt_embeds (no attention mask, as FluxPipeline), both cast to the transformer's dtype.
  FluxPromptEmbeds encode_prompt_ids(const Tensor& clip_ids, const Tensor& t5_ids);
  // Diffusers' encode_prompt: CLIP ids padded/truncated to 77 -> pooled output; T5 ids (prompt_2,
  // defaulting to prompt) padded/truncated to max_sequence_length -> prompt_embeds. One row per prompt.
  // (flux_prompt.cpp)
  FluxPromptEmbeds encode_prompt(const std::vector<std::string>& prompts,
                                 const std::vector<std::string>& prompts_2 = {},
                                 int64_t max_sequence_length = 512);

  // 2^(len(vae block_out_channels) - 1); 8 without a VAE (as Diffusers).
  int64_t vae_scale_factor() const;
  int64_t num_channels_latents() const { return transformer->config.in_channels / 4; }

  std::unique_ptr<models::flux::FluxTransformer2DModel> transformer;
  std::unique_ptr<vae::AutoencoderKL> vae;  // may be null (output_type "latent" only)
  std::unique_ptr<FlowMatchEulerDiscreteScheduler> scheduler;
  std::unique_ptr<clip::CLIPTextModel> text_encoder;   // may be null
  std::unique_ptr<t5::T5EncoderModel> text_encoder_2;  // may be null
  std::unique_ptr<tokenizers::CLIPTokenizer> tokenizer;   // loaded with the text encoders
  std::unique_ptr<tokenizers::T5Tokenizer> tokenizer_2;

  // Each quantized component's backend and scheme, e.g. {"transformer": "bitsandbytes_4bit nf4"}.
  std::map<std::string, std::string> quantization;
  // The configured backend of each quantized component (what `diffq quantize` saves with).
  std::map<std::string, std::shared_ptr<const quant::QuantMethod>> quant_methods;
  // Components converted from another pre-quantized format (FluxPipelineLoadOptions::convert_pre_quantized):
  // the source's label.
  std::map<std::string, std::string> converted_from;
  std::filesystem::path transformer_file;  // the single file the transformer came from, if any
  // Where the denoising runs (pipeline_device.h): prompt embeddings, ids, latents and timesteps are made
  // or moved there; the image comes back to the host once, after the VAE.
  Device device = Device::cpu();

  // ---- offloading: Diffusers' API; the engine is src/offload (docs/offload.md) ----
  static constexpr const char* model_cpu_offload_seq = "text_encoder->text_encoder_2->transformer->vae";
  // {text_encoder, text_encoder_2, transformer, vae}; absent ones are null.
  offload::NamedModules offload_components() const;
  // device nullopt: the accelerator (Diffusers' error when there is none); Device::cpu() runs the hooks
  // with the RAM as the working set, useful with a disk home (`disk_path`).
  void enable_model_cpu_offload(std::optional<Device> device = std::nullopt,
                                const std::filesystem::path& disk_path = {});
  void enable_sequential_cpu_offload(std::optional<Device> device = std::nullopt,
                                     const std::filesystem::path& disk_path = {});
  void enable_group_offload(const offload::GroupOffloadOptions& o,
                            const std::vector<std::string>& exclude_modules = {});
  void maybe_free_model_hooks() { offloader.maybe_free_model_hooks(); }  // run at the end of operator()
  void remove_all_hooks() { offloader.remove_all_hooks(); }
  offload::PipelineOffloader offloader;
};

}  // namespace diffq
