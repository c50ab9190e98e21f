// AutoencoderKLWan (diffusers models/autoencoders/autoencoder_kl_wan.py): the causal video VAE of
// Wan2.1, and Wan2.2's variant (is_residual: residual down/up blocks with AvgDown3D / DupUp3D
// shortcuts, patch_size 2, z_dim 48, decoder_base_dim).
//
// decode() runs the decoder one latent frame at a time as Diffusers does (the causal convs carry the
// last two frames of the previous chunk in a feature cache) and writes each chunk, clamped, into ONE
// preallocated output video, so the peak memory above the output does not grow with the frame count.
// encode() runs the first frame alone, then chunks of four. No latent normalisation here: the pipeline
// applies latents * std + mean (WanPipeline: latents / (1 / std) + mean) before decode.
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "io/json_config.h"
#include "models/vae/wan_vae_blocks.h"
#include "modules/state_dict.h"

namespace diffq::vae {

// config.json of an AutoencoderKLWan, with Diffusers' defaults for absent or null keys.
struct AutoencoderKLWanConfig {
  int64_t base_dim = 96;
  std::optional<int64_t> decoder_base_dim;  // null -> base_dim
  int64_t z_dim = 16;
  std::vector<int64_t> dim_mult = {1, 2, 4, 4};
  int64_t num_res_blocks = 2;
  std::vector<double> attn_scales;
  std::vector<bool> temperal_downsample = {false, true, true};
  double dropout = 0.0;
  std::vector<double> latents_mean;  // z_dim values (Diffusers' Wan2.1 defaults when absent)
  std::vector<double> latents_std;
  bool is_residual = false;
  int64_t in_channels = 3;   // of the encoder's conv_in: video channels * patch_size^2 (Wan2.2: 12)
  int64_t out_channels = 3;  // of the decoder's conv_out, likewise
  std::optional<int64_t> patch_size;  // null: no patchify
  int64_t scale_factor_temporal = 4;
  int64_t scale_factor_spatial = 8;

  AutoencoderKLWanConfig();
  int64_t decoder_dim() const { return decoder_base_dim.value_or(base_dim); }
  int64_t patch() const { return patch_size.value_or(1); }
  int64_t video_in_channels() const { return in_channels / (patch() * patch()); }
  int64_t video_out_channels() const { return out_channels / (patch() * patch()); }
  // Spatial factor of the encoder/decoder proper (2^(levels - 1)), times the patch size.
  int64_t spatial_factor() const { return (int64_t{1} << (dim_mult.size() - 1)) * patch(); }
  int64_t temporal_doublings() const;  // number of true entries in temperal_downsample

  static AutoencoderKLWanConfig from_json(const io::JsonConfig& j);
  void validate(const std::string& source = "AutoencoderKLWan config") const;
};

// WanEncoder3d: conv_in, down_blocks (2.1: residual/attention/resample layers; 2.2: residual down
// blocks), mid_block, norm_out, SiLU, conv_out (to 2 * z_dim).
class WanEncoder3d : public Module {
 public:
  explicit WanEncoder3d(const AutoencoderKLWanConfig& c);
  Tensor operator()(const Tensor& x, WanFeatCache& cache) { return call([&] { return forward(x, cache); }); }
  Tensor forward(const Tensor& x, WanFeatCache& cache);  // [t, in*p^2, H, W] -> [t', 2z, H/f, W/f]

  WanCausalConv3d conv_in;
  ModuleList<WanBlock> down_blocks;
  WanMidBlock mid_block;
  WanRMSNorm norm_out;
  WanCausalConv3d conv_out;
};

// WanDecoder3d: conv_in, mid_block, up_blocks, norm_out, SiLU, conv_out (to out_channels * p^2).
class WanDecoder3d : public Module {
 public:
  explicit WanDecoder3d(const AutoencoderKLWanConfig& c);
  Tensor operator()(const Tensor& z, WanFeatCache& cache, bool first_chunk) {
    return call([&] { return forward(z, cache, first_chunk); });
  }
  Tensor forward(const Tensor& z, WanFeatCache& cache, bool first_chunk);  // [1, z, h, w] -> [t, out*p^2, h*f, w*f]

  WanCausalConv3d conv_in;
  WanMidBlock mid_block;
  ModuleList<WanBlock> up_blocks;
  WanRMSNorm norm_out;
  WanCausalConv3d conv_out;
};

class AutoencoderKLWan : public Module {
 public:
  explicit AutoencoderKLWan(AutoencoderKLWanConfig cfg);

  // Builds the module from <dir>/config.json and loads <dir>'s weights (a model folder such as a
  // pipeline's vae/, or a pipeline folder, whose "vae" component is used). opt.source defaults to dir.
  static std::unique_ptr<AutoencoderKLWan> from_pretrained(const std::filesystem::path& dir, LoadOptions opt = {});
  LoadReport load(const StateDict& sd, const LoadOptions& opt = {});
  // Lays every causal conv's weight out for the one-conv2d-per-chunk form (load() does it; call it after
  // setting weights another way, e.g. init_parameters_randn). Idempotent.
  void prepare();

  const AutoencoderKLWanConfig& config() const { return cfg_; }
  DType dtype() const;

  // z [B, z_dim, T, h, w] -> video [B, video_out_channels, 1 + 2^n (T - 1), h*f, w*f] (n = temporal doublings,
  // f = spatial factor), clamped to [-1, 1] as Diffusers 0.42.1 always does.
  Tensor decode(const Tensor& z) { return call([&] { return decode_forward(z); }); }
  // x [B, video_in_channels, F, H, W] -> the posterior's parameters [B, 2 z_dim, 1 + (F-1)/4, H/f, W/f]: mean first,
  // then the (unclamped) log-variance; DiagonalGaussian's mode is the mean.
  Tensor encode(const Tensor& x) { return call([&] { return encode_forward(x); }); }
  Tensor decode_forward(const Tensor& z);
  Tensor encode_forward(const Tensor& x);

  // Diffusers' enable_tiling(tile_sample_min_height, _width, tile_sample_stride_height, _width): decode
  // and encode of videos larger than a tile run tile by tile (see wan_vae_tiling.h), blended as
  // Diffusers' tiled_decode / tiled_encode. Sizes are in video pixels.
  void enable_tiling(int64_t tile_h = 256, int64_t tile_w = 256, int64_t stride_h = 192, int64_t stride_w = 192);
  void disable_tiling() { tiling_ = false; }
  bool tiling() const { return tiling_; }

  WanEncoder3d encoder;
  WanCausalConv3d quant_conv;       // 1x1x1, 2z -> 2z
  WanCausalConv3d post_quant_conv;  // 1x1x1, z -> z
  WanDecoder3d decoder;

 private:
  // Decodes x [T, z, h, w] (after post_quant_conv) one latent frame at a time with a fresh cache, handing
  // each decoded chunk y [t, out*p^2, h*f/p, w*f/p] (unclamped, patchified) and its first frame to sink.
  void decode_frames(const Tensor& x, const std::function<void(const Tensor& y, int64_t f0)>& sink);
  // Encodes patchified frames [F, in*p^2, H, W] (first frame, then chunks of 4) to quant_conv's [T, 2z, h, w].
  Tensor encode_frames(const Tensor& x);

  AutoencoderKLWanConfig cfg_;
  bool tiling_ = false;
  int64_t tile_h_ = 256, tile_w_ = 256, stride_h_ = 192, stride_w_ = 192;
};

// patchify / unpatchify of one sample's frames (Diffusers' channel order c*p*p + pw*p + ph).
Tensor wan_patchify(const Tensor& x, int64_t p);    // [T, C, H, W] -> [T, C*p*p, H/p, W/p]
Tensor wan_unpatchify(const Tensor& x, int64_t p);  // [T, C*p*p, h, w] -> [T, C, h*p, w*p]

}  // namespace diffq::vae
