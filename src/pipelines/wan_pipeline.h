// WanPipeline (Diffusers 0.42.1, pipelines/wan/pipeline_wan.py): text to video for Wan2.1 and Wan2.2.
//
// What __call__ does, in the same order and dtypes:
// - prompts cleaned (ftfy-style fixes, HTML unescape twice, whitespace collapse), tokenized to
//   max_sequence_length with the attention mask; the text encoder's output cut to each prompt's real length
//   and zero-padded back; each row repeated num_videos_per_prompt times. CFG (two transformer passes,
//   cond and uncond) when guidance_scale > 1; the negative prompt defaults to "".
// - num_frames not of the form 4k + 1 is rounded to num_frames // 4 * 4 + 1, as Diffusers does (diffq says so on stderr);
//   height / width must be multiples of 16 (else an error, as Diffusers' check_inputs); multiples of 16 that
//   are not multiples of vae_scale_factor_spatial x patch (32 for TI2V-5B) are floored to them, as Diffusers
//   does (diffq says so on stderr).
// - latents float32 [B, C, (F - 1) / 4 + 1, H / s, W / s] = randn_tensor(seed) (or given).
// - per step: the model input is latents cast to the transformer's dtype; timestep t (int64 for UniPC,
//   float32 for FlowMatchEuler) expanded to [B], or, with expand_timesteps (TI2V-5B), t for every latent
//   token [B, F * H/2 * W/2] in float32. Wan2.2 A14B (boundary_ratio set): steps with
//   t >= boundary_ratio * num_train_timesteps run `transformer` with guidance_scale, the others
//   `transformer_2` with guidance_scale_2 (default: guidance_scale). v = v_u + g (v_c - v_u) in the
//   transformer's dtype; the scheduler steps the float32 latents.
// - output "latent": the final latents; else latents.to(vae dtype) / (1 / std) + mean per channel,
//   vae.decode -> [B, 3, F, H, W] in [-1, 1], frames = clamp(x / 2 + 0.5, 0, 1) as [B, F, H, W, 3]
//   float32 (Diffusers' output_type "np") and round(x * 255) as uint8 (output_type "pil").
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
#include "models/t5/t5_encoder.h"
#include "models/vae/autoencoder_kl_wan.h"
#include "models/wan/wan_transformer.h"
#include "offload/pipeline_offloader.h"
#include "pipelines/pipeline_quantization_config.h"
#include "pipelines/step_callback.h"
#include "pipelines/wan_scheduler.h"
#include "quant/quant_method.h"
#include "tokenizers/t5_tokenizer.h"

namespace diffq {

struct WanCallOptions {
  // Text prompts (one video each, times num_videos_per_prompt) ...
  std::vector<std::string> prompt;
  std::vector<std::string> negative_prompt;  // empty = "" for every prompt; 1 (shared) or one per prompt
  int64_t num_videos_per_prompt = 1;
  int64_t max_sequence_length = 512;
  // ... or pre-computed embeddings [B, L, text_dim] (used as given, not repeated).
  Tensor prompt_embeds;
  Tensor negative_prompt_embeds;
  int64_t height = 480, width = 832;
  int64_t num_frames = 81;
  int64_t num_inference_steps = 50;
  double guidance_scale = 5.0;
  std::optional<double> guidance_scale_2;  // Wan2.2 two-expert folders only (default: guidance_scale)
  uint64_t seed = 0;                       // torch.Generator("cpu").manual_seed(seed)
  Tensor latents;                          // optional [B, C, T, h, w]; replaces the noise
  std::string output_type = "np";          // "np" (frames) or "latent"
  StepCallback callback;                   // optional: (step, total, t) -> false interrupts
  std::function<void(int64_t step, const Tensor& latents)> latents_observer;  // optional, after each step, before `callback`
};

struct WanOutput {
  Tensor latents;     // final latents [B, C, T, h, w] float32 (always set)
  Tensor frames_f32;  // [B, F, H, W, 3] in [0, 1] (output_type "np")
  Tensor frames_u8;   // [B, F, H, W, 3] uint8
  int64_t num_frames = 0;          // after the 4k + 1 rounding
  int64_t height = 0, width = 0;   // after the flooring to the spatial factor x the patch size
  int64_t steps_run = 0;
  bool interrupted = false;
  double encode_prompt_s = 0, denoise_s = 0, decode_s = 0;  // wall time of each stage
  CacheReport cache;  // steps computed vs skipped (when a transformer's enable_cache was called)
};

struct WanPipelineLoadOptions {
  bool load_text_encoder = true;  // text_encoder + tokenizer
  // A single-file transformer (original Wan / ComfyUI or Diffusers naming .safetensors, or a city96-style
  // .gguf whose quantized weights stay quantized) replacing the folder's `transformer`; the folder's
  // transformer/config.json, when present, must agree with the file's shapes.
  std::filesystem::path transformer_file = {};
  std::optional<PipelineQuantizationConfig> quantization_config = {};
  // As FluxPipelineLoadOptions::convert_pre_quantized.
  bool convert_pre_quantized = false;
};

class WanPipeline {
 public:
  static std::unique_ptr<WanPipeline> from_pretrained(const std::filesystem::path& folder,
                                                      std::optional<DType> dtype = std::nullopt,
                                                      const WanPipelineLoadOptions& opt = {});

  WanOutput operator()(const WanCallOptions& opt);

  // Diffusers' _get_t5_prompt_embeds: one row per prompt, [B, max_sequence_length, d_model] in the
  // transformer's dtype.
  Tensor encode_prompt(const std::vector<std::string>& prompts, int64_t max_sequence_length = 512);

  // The frame count WanPipeline runs for `num_frames`: num_frames // 4 * 4 + 1 unless already 4k + 1 (7 -> 5,
  // 8 -> 9), as Diffusers; < 1 is an error.
  int64_t rounded_num_frames(int64_t num_frames) const;
  int64_t vae_scale_factor_temporal() const;
  int64_t vae_scale_factor_spatial() const;
  // Height and width must be multiples of this (spatial factor x the transformer's patch size).
  int64_t size_multiple() const;
  models::wan::WanTransformer3DModel& first_transformer() const {
    return transformer ? *transformer : *transformer_2;
  }

  std::unique_ptr<models::wan::WanTransformer3DModel> transformer;    // high noise (or the only one)
  std::unique_ptr<models::wan::WanTransformer3DModel> transformer_2;  // Wan2.2 low-noise expert (may be null)
  std::unique_ptr<vae::AutoencoderKLWan> vae;                         // may be null (latent output only)
  std::unique_ptr<WanScheduler> scheduler;
  std::unique_ptr<t5::T5EncoderModel> text_encoder;  // UMT5 (or T5) encoder; may be null
  std::unique_ptr<tokenizers::T5Tokenizer> tokenizer;
  // Where the denoising runs (pipeline_device.h): prompt embeddings, latents and timesteps are made or
  // moved there; the frames come back to the host once, after the VAE.
  Device device = Device::cpu();
  std::optional<double> boundary_ratio;  // model_index.json
  bool expand_timesteps = false;         // model_index.json (TI2V-5B)

  std::map<std::string, std::string> quantization;
  std::map<std::string, std::shared_ptr<const quant::QuantMethod>> quant_methods;

  static constexpr const char* model_cpu_offload_seq = "text_encoder->transformer->transformer_2->vae";
  offload::NamedModules offload_components() const;
  offload::PipelineOffloader offloader;
};

}  // namespace diffq
