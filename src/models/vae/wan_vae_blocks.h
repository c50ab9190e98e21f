// The blocks of Wan's video VAE (diffusers models/autoencoders/autoencoder_kl_wan.py): the channel
// RMS norm, residual and attention blocks, resampling (2D/3D, up/down), the mid block, the Wan2.1 up
// block and Wan2.2's residual down/up blocks with their parameter-free shortcuts (AvgDown3D, DupUp3D).
// Every tensor is one sample's frames-major video [T, C, H, W] (see causal_conv3d.h). Parameter names
// are Diffusers' state-dict keys.
#pragma once

#include <memory>
#include <string>

#include "models/vae/blocks.h"
#include "models/vae/causal_conv3d.h"
#include "modules/layers.h"

namespace diffq::vae {

// A block of the encoder's down_blocks / the decoder's up_blocks: one chunk of frames in, with the
// feature cache; first_chunk only matters to DupUp3D (decoder, first latent frame).
class WanBlock : public Module {
 public:
  using Module::Module;
  Tensor operator()(const Tensor& x, WanFeatCache& cache, bool first_chunk = false) {
    return call([&] { return forward(x, cache, first_chunk); });
  }
  virtual Tensor forward(const Tensor& x, WanFeatCache& cache, bool first_chunk) = 0;
};

// WanRMS_norm: F.normalize over channels (x / max(||x||_2, 1e-12)) * sqrt(dim) * gamma. gamma has the
// checkpoint's shape: [dim, 1, 1] (images) or [dim, 1, 1, 1]. One ops::channel_norm: f32 arithmetic,
// in bf16 rounded as Diffusers 0.42.1 (normalized in f32, rounded, then each product rounded).
class WanRMSNorm : public Module {
 public:
  WanRMSNorm(int64_t dim, bool images);
  Tensor operator()(const Tensor& x) { return call1(x, &WanRMSNorm::forward); }
  Tensor forward(const Tensor& x);  // [N, C, H, W] -> [N, C, H, W]
  // silu(norm(x)) in one op (ops::channel_norm_silu): the same values as the two ops.
  Tensor with_silu(const Tensor& x) { return call1(x, &WanRMSNorm::forward_silu); }
  Tensor forward_silu(const Tensor& x);
  int64_t dim;
  Parameter gamma;
};

// WanResidualBlock: conv_shortcut(x) + conv2(silu(norm2(conv1(silu(norm1(x)))))) (dropout: inference).
class WanResidualBlock : public WanBlock {
 public:
  WanResidualBlock(int64_t in_dim, int64_t out_dim);
  Tensor forward(const Tensor& x, WanFeatCache& cache, bool first_chunk = false) override;  // [T, Cin, H, W] -> [T, Cout, H, W]
  WanRMSNorm norm1;
  WanCausalConv3d conv1;
  WanRMSNorm norm2;
  WanCausalConv3d conv2;
  std::unique_ptr<WanCausalConv3d> conv_shortcut;  // 1x1x1 when in_dim != out_dim
};

// WanAttentionBlock: per frame, one head over the H*W positions, to_qkv / proj as 1x1 convs, residual.
class WanAttentionBlock : public WanBlock {
 public:
  explicit WanAttentionBlock(int64_t dim);
  Tensor forward(const Tensor& x, WanFeatCache& cache, bool first_chunk = false) override;  // [T, C, H, W]
  WanRMSNorm norm;
  Conv2d to_qkv;  // [3C, C, 1, 1]
  Conv2d proj;    // [C, C, 1, 1]
};

// resample = nn.Sequential(<Upsample or ZeroPad2d>, Conv2d): only its "1" has parameters.
class WanResampleConv : public Module {
 public:
  WanResampleConv(int64_t in, int64_t out, int64_t stride, ops::Conv2dPad pad);
  AsymmetricConv2d conv;
};

enum class WanResampleMode { none, upsample2d, upsample3d, downsample2d, downsample3d };
WanResampleMode wan_resample_mode(const std::string& name);

// WanResample: upsample2d (nearest x2 + 3x3 conv to upsample_out_dim), upsample3d (time_conv doubling
// the frames from the second chunk on, then as 2d), downsample2d (pad right/bottom, 3x3 stride 2),
// downsample3d (as 2d, then a stride-2 time_conv over the previous chunk's last frame + this chunk,
// from the second chunk on).
class WanResample : public WanBlock {
 public:
  WanResample(int64_t dim, WanResampleMode mode, int64_t upsample_out_dim = -1);  // -1: dim / 2
  Tensor forward(const Tensor& x, WanFeatCache& cache, bool first_chunk = false) override;
  int64_t dim;
  WanResampleMode mode;
  std::unique_ptr<WanResampleConv> resample;
  std::unique_ptr<WanCausalConv3d> time_conv;
};

// AvgDown3D (no parameters): zero frames in front up to a multiple of factor_t, space-and-time to
// channels, then the mean of each group of in*factor/out consecutive channels.
struct WanAvgDown3D {
  int64_t in_channels, out_channels, factor_t, factor_s;
  Tensor operator()(const Tensor& x) const;  // [T, Cin, H, W] -> [ceil(T/ft), Cout, H/fs, W/fs]
};

// DupUp3D (no parameters): each channel repeated out*factor/in times, channels to space and time;
// on the first chunk the first factor_t - 1 frames are dropped.
struct WanDupUp3D {
  int64_t in_channels, out_channels, factor_t, factor_s;
  Tensor operator()(const Tensor& x, bool first_chunk) const;  // [T, Cin, H, W] -> [T*ft (- ft+1), Cout, H*fs, W*fs]
};

// WanMidBlock: resnets.0, then (attentions.0, resnets.1).
class WanMidBlock : public Module {
 public:
  explicit WanMidBlock(int64_t dim);
  Tensor operator()(const Tensor& x, WanFeatCache& cache) { return call([&] { return forward(x, cache); }); }
  Tensor forward(const Tensor& x, WanFeatCache& cache);
  ModuleList<WanAttentionBlock> attentions;
  ModuleList<WanResidualBlock> resnets;
};

// WanResidualDownBlock (Wan2.2 encoder): resnets, optional downsampler, plus AvgDown3D of the input.
class WanResidualDownBlock : public WanBlock {
 public:
  WanResidualDownBlock(int64_t in_dim, int64_t out_dim, int64_t num_res_blocks, bool temperal_downsample,
                       bool down_flag);
  Tensor forward(const Tensor& x, WanFeatCache& cache, bool first_chunk = false) override;
  WanAvgDown3D avg_shortcut;
  ModuleList<WanResidualBlock> resnets;
  std::unique_ptr<WanResample> downsampler;
};

// WanUpBlock (Wan2.1 decoder): num_res_blocks + 1 resnets, then upsamplers.0 (to out_dim / 2).
class WanUpBlock : public WanBlock {
 public:
  WanUpBlock(int64_t in_dim, int64_t out_dim, int64_t num_res_blocks, WanResampleMode upsample_mode);
  Tensor forward(const Tensor& x, WanFeatCache& cache, bool first_chunk = false) override;
  ModuleList<WanResidualBlock> resnets;
  ModuleList<WanResample> upsamplers;
};

// WanResidualUpBlock (Wan2.2 decoder): resnets, optional upsampler (to out_dim), plus DupUp3D of the input.
class WanResidualUpBlock : public WanBlock {
 public:
  WanResidualUpBlock(int64_t in_dim, int64_t out_dim, int64_t num_res_blocks, bool temperal_upsample,
                     bool up_flag);
  Tensor forward(const Tensor& x, WanFeatCache& cache, bool first_chunk) override;
  std::unique_ptr<WanDupUp3D> avg_shortcut;
  ModuleList<WanResidualBlock> resnets;
  std::unique_ptr<WanResample> upsampler;
};

}  // namespace diffq::vae
