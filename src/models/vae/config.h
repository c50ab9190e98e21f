// AutoencoderKL's config.json (diffusers.models.autoencoders.autoencoder_kl.AutoencoderKL), with
// Diffusers' defaults for absent or null keys. Unknown keys are ignored, as Diffusers does.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "io/json_config.h"

namespace diffq::vae {

struct AutoencoderKLConfig {
  int64_t in_channels = 3;
  int64_t out_channels = 3;
  std::vector<std::string> down_block_types = {"DownEncoderBlock2D"};
  std::vector<std::string> up_block_types = {"UpDecoderBlock2D"};
  std::vector<int64_t> block_out_channels = {64};
  int64_t layers_per_block = 1;
  std::string act_fn = "silu";
  int64_t latent_channels = 4;
  int64_t norm_num_groups = 32;
  int64_t sample_size = 32;
  double scaling_factor = 0.18215;
  std::optional<double> shift_factor;  // null in SD VAEs; 0.1159 in FLUX.1's
  bool force_upcast = true;            // pipelines decode fp16 latents in fp32 when set (see header)
  bool use_quant_conv = true;
  bool use_post_quant_conv = true;
  bool mid_block_add_attention = true;

  // Image pixels per latent pixel: 2^(number of blocks - 1).
  int64_t vae_scale_factor() const { return int64_t{1} << (block_out_channels.size() - 1); }

  // Parses and validates (only the block types, activation and group counts diffq implements).
  static AutoencoderKLConfig from_json(const io::JsonConfig& cfg);
  void validate(const std::string& source = "AutoencoderKL config") const;
};

}  // namespace diffq::vae
