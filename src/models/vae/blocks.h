// The building blocks of AutoencoderKL (diffusers models/resnet.py, downsampling.py, upsampling.py,
// attention_processor.py, unets/unet_2d_blocks.py), restricted to what the VAE uses: no time
// embedding, GroupNorm everywhere, SiLU, one attention head spanning all channels.
// Parameter names are Diffusers' state-dict keys.
#pragma once

#include <memory>

#include "modules/layers.h"
#include "ops/ops.h"

namespace diffq::vae {

// Sets the layout of every Conv2d and GroupNorm under root (the blocks below follow theirs): the image
// tensors between them are then [B, H, W, C] (channels-last) or [B, C, H, W]. The shape comments below
// name channels-first.
void use_image_layout(Module& root, ops::ImageLayout layout);
// The layout the device of x prefers for x's dtype (ops::prefers_channels_last).
ops::ImageLayout preferred_image_layout(const Tensor& x);

// ResnetBlock2D without temb: out = (shortcut(x) + conv2(silu(norm2(conv1(silu(norm1(x))))))) / s.
class ResnetBlock2D : public Module {
 public:
  ResnetBlock2D(int64_t in_channels, int64_t out_channels, int64_t groups, double eps = 1e-6,
                double output_scale_factor = 1.0);
  Tensor operator()(const Tensor& x) { return call([&] { return forward(x); }); }
  Tensor forward(const Tensor& x);  // [B, Cin, H, W] -> [B, Cout, H, W]

  GroupNorm norm1;
  Conv2d conv1;
  GroupNorm norm2;
  Conv2d conv2;
  std::unique_ptr<Conv2d> conv_shortcut;  // 1x1, present when Cin != Cout
  double output_scale_factor;
};

// A Conv2d (same parameters, same hooks) whose zero padding differs per side: Downsample2D's
// F.pad(x, (0, 1, 0, 1)) followed by a padding-0 conv, as one op.
class AsymmetricConv2d : public Conv2d {
 public:
  AsymmetricConv2d(int64_t in_channels, int64_t out_channels, int64_t kernel, int64_t stride,
                   ops::Conv2dPad pad);
  Tensor operator()(const Tensor& x) { return call([&] { return forward(x); }); }
  Tensor forward(const Tensor& x);
  ops::Conv2dPad pad;
};

// Downsample2D(use_conv=True, padding=0): pad right and bottom by one, then 3x3 stride 2.
class Downsample2D : public Module {
 public:
  Downsample2D(int64_t channels, int64_t out_channels);
  Tensor operator()(const Tensor& x) { return call([&] { return forward(x); }); }
  Tensor forward(const Tensor& x);  // [B, C, H, W] -> [B, Cout, H/2, W/2] (floor)
  AsymmetricConv2d conv;
};

// Upsample2D(use_conv=True): nearest-neighbour 2x, then 3x3.
class Upsample2D : public Module {
 public:
  Upsample2D(int64_t channels, int64_t out_channels);
  Tensor operator()(const Tensor& x) { return call([&] { return forward(x); }); }
  Tensor forward(const Tensor& x);  // [B, C, H, W] -> [B, Cout, 2H, 2W]
  Conv2d conv;
};

// The mid block's Attention (_from_deprecated_attn_block): GroupNorm, one head of dim C over the
// H*W positions, residual connection, divided by rescale_output_factor.
class SpatialSelfAttention : public Module {
 public:
  SpatialSelfAttention(int64_t channels, int64_t groups, double eps = 1e-6,
                       double rescale_output_factor = 1.0);
  Tensor operator()(const Tensor& x) { return call([&] { return forward(x); }); }
  Tensor forward(const Tensor& x);  // [B, C, H, W] -> [B, C, H, W]

  GroupNorm group_norm;
  Linear to_q, to_k, to_v;
  ModuleList<Linear> to_out;  // to_out.0 (to_out.1 is dropout: no parameters)
  double rescale_output_factor;
};

// UNetMidBlock2D without temb: resnets.0, then (attentions.0, resnets.1).
class UNetMidBlock2D : public Module {
 public:
  UNetMidBlock2D(int64_t channels, int64_t groups, bool add_attention);
  Tensor operator()(const Tensor& x) { return call([&] { return forward(x); }); }
  Tensor forward(const Tensor& x);  // [B, C, H, W] -> [B, C, H, W]

  ModuleList<ResnetBlock2D> resnets;
  ModuleList<SpatialSelfAttention> attentions;  // empty when add_attention is false
};

// DownEncoderBlock2D: num_layers resnets, then an optional downsampler.
class DownEncoderBlock2D : public Module {
 public:
  DownEncoderBlock2D(int64_t in_channels, int64_t out_channels, int64_t num_layers, int64_t groups,
                     bool add_downsample);
  Tensor operator()(const Tensor& x) { return call([&] { return forward(x); }); }
  Tensor forward(const Tensor& x);  // [B, Cin, H, W] -> [B, Cout, H/2, W/2] (or H, W)

  ModuleList<ResnetBlock2D> resnets;
  ModuleList<Downsample2D> downsamplers;
};

// UpDecoderBlock2D: num_layers resnets, then an optional upsampler.
class UpDecoderBlock2D : public Module {
 public:
  UpDecoderBlock2D(int64_t in_channels, int64_t out_channels, int64_t num_layers, int64_t groups,
                   bool add_upsample);
  Tensor operator()(const Tensor& x) { return call([&] { return forward(x); }); }
  Tensor forward(const Tensor& x);  // [B, Cin, H, W] -> [B, Cout, 2H, 2W] (or H, W)

  ModuleList<ResnetBlock2D> resnets;
  ModuleList<Upsample2D> upsamplers;
};

}  // namespace diffq::vae
