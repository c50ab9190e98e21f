#include "models/vae/blocks.h"

#include "ops/ops.h"

namespace diffq::vae {


// ---- image layout ----------------------------------------------------------------------------------

void use_image_layout(Module& root, ops::ImageLayout layout) {
  for (auto& [name, m] : root.named_modules()) {
    if (auto* conv = dynamic_cast<Conv2d*>(m)) conv->layout = layout;
    if (auto* norm = dynamic_cast<GroupNorm*>(m)) norm->layout = layout;
  }
}

ops::ImageLayout preferred_image_layout(const Tensor& x) {
  return ops::prefers_channels_last(x.device(), x.dtype()) ? ops::ImageLayout::channels_last
                                                           : ops::ImageLayout::channels_first;
}

// ---- ResnetBlock2D ---------------------------------------------------------------------------------

ResnetBlock2D::ResnetBlock2D(int64_t in_channels, int64_t out_channels, int64_t groups, double eps,
                             double scale)
    : Module("ResnetBlock2D"),
      norm1(groups, in_channels, eps),
      conv1(in_channels, out_channels, 3, 1, 1),
      norm2(groups, out_channels, eps),
      conv2(out_channels, out_channels, 3, 1, 1),
      output_scale_factor(scale) {
  register_module("norm1", norm1);
  register_module("conv1", conv1);
  register_module("norm2", norm2);
  register_module("conv2", conv2);
  if (in_channels != out_channels) {
    conv_shortcut = std::make_unique<Conv2d>(in_channels, out_channels, 1, 1, 0);
    register_module("conv_shortcut", *conv_shortcut);
  }
}

Tensor ResnetBlock2D::forward(const Tensor& x) {  // x [B, Cin, H, W]
  Tensor h = norm1.with_silu(x);                   // silu(norm1(x)): [B, Cin, H, W]
  h = conv1(h);                                    // [B, Cout, H, W]
  h = norm2.with_silu(h);                          // [B, Cout, H, W]
  const Tensor skip = conv_shortcut ? (*conv_shortcut)(x) : x;  // [B, Cout, H, W]
  Tensor out = conv2.add_to(skip, h);                              // skip + conv2(h): [B, Cout, H, W]
  if (output_scale_factor != 1.0) out = ops::mul_scalar(out, 1.0 / output_scale_factor);
  return out;
}

// ---- Downsample2D / Upsample2D ---------------------------------------------------------------------

AsymmetricConv2d::AsymmetricConv2d(int64_t in_channels, int64_t out_channels, int64_t kernel,
                                   int64_t stride, ops::Conv2dPad p)
    : Conv2d(in_channels, out_channels, kernel, stride, 0), pad(p) {}

Tensor AsymmetricConv2d::forward(const Tensor& x) {
  static const Tensor none;
  return ops::conv2d(x, weight.dense(), has_bias ? bias.dense() : none, stride, pad, layout);
}

Downsample2D::Downsample2D(int64_t channels, int64_t out_channels)
    : Module("Downsample2D"),
      conv(channels, out_channels, 3, 2, {.left = 0, .right = 1, .top = 0, .bottom = 1}) {
  register_module("conv", conv);
}

Tensor Downsample2D::forward(const Tensor& x) {  // x [B, C, H, W]
  return conv(x);  // zero pad right/bottom by 1, 3x3 stride 2: [B, Cout, H/2, W/2] (floor)
}

Upsample2D::Upsample2D(int64_t channels, int64_t out_channels)
    : Module("Upsample2D"), conv(channels, out_channels, 3, 1, 1) {
  register_module("conv", conv);
}

Tensor Upsample2D::forward(const Tensor& x) {     // x [B, C, H, W] (or [B, H, W, C]: conv.layout)
  Tensor up = ops::upsample_nearest2x(x, conv.layout);  // [B, C, 2H, 2W]
  return conv(up);                                      // [B, Cout, 2H, 2W]
}

// ---- Attention -------------------------------------------------------------------------------------

SpatialSelfAttention::SpatialSelfAttention(int64_t channels, int64_t groups, double eps,
                                           double rescale)
    : Module("Attention"),
      group_norm(groups, channels, eps),
      to_q(channels, channels),
      to_k(channels, channels),
      to_v(channels, channels),
      rescale_output_factor(rescale) {
  register_module("group_norm", group_norm);
  register_module("to_q", to_q);
  register_module("to_k", to_k);
  register_module("to_v", to_v);
  to_out.push_back(std::make_unique<Linear>(channels, channels));
  register_module("to_out", to_out);
}

Tensor SpatialSelfAttention::forward(const Tensor& x) {  // x [B, C, H, W] (or [B, H, W, C]: group_norm.layout)
  const bool last = group_norm.layout == ops::ImageLayout::channels_last;
  const int64_t B = x.shape()[0], C = x.shape()[last ? 3 : 1], H = x.shape()[last ? 1 : 2], W = x.shape()[last ? 2 : 3];
  Tensor t = last ? group_norm(x).reshape({B, H * W, C})  // [B, S, C]
                  : group_norm(x)                         // [B, C, H, W]
                        .reshape({B, C, H * W})           // [B, C, S]
                        .transpose(1, 2)                  // [B, S, C]
                        .contiguous();
  Tensor q = to_q(t).unsqueeze(1);  // [B, 1, S, C]: one head of dim C
  Tensor k = to_k(t).unsqueeze(1);  // [B, 1, S, C]
  Tensor v = to_v(t).unsqueeze(1);  // [B, 1, S, C]
  t = Tensor();
  Tensor a = ops::sdpa(q, k, v).squeeze(1);  // [B, S, C], softmax(q k^T / sqrt(C)) v
  q = k = v = Tensor();
  a = to_out[0](a);                                    // [B, S, C]
  a = last ? a.reshape({B, H, W, C})                   // [B, H, W, C]
           : a.transpose(1, 2).reshape({B, C, H, W});  // [B, C, H, W]
  Tensor out = ops::add(a, x);                         // residual
  if (rescale_output_factor != 1.0) out = ops::mul_scalar(out, 1.0 / rescale_output_factor);
  return out;
}

// ---- UNetMidBlock2D --------------------------------------------------------------------------------

UNetMidBlock2D::UNetMidBlock2D(int64_t channels, int64_t groups, bool add_attention)
    : Module("UNetMidBlock2D") {
  resnets.push_back(std::make_unique<ResnetBlock2D>(channels, channels, groups));
  if (add_attention) attentions.push_back(std::make_unique<SpatialSelfAttention>(channels, groups));
  resnets.push_back(std::make_unique<ResnetBlock2D>(channels, channels, groups));
  if (add_attention) register_module("attentions", attentions);
  register_module("resnets", resnets);
}

Tensor UNetMidBlock2D::forward(const Tensor& x) {  // x [B, C, H, W]
  Tensor h = resnets[0](x);                        // [B, C, H, W]
  if (attentions.size() > 0) h = attentions[0](h);  // [B, C, H, W]
  return resnets[1](h);                             // [B, C, H, W]
}

// ---- DownEncoderBlock2D / UpDecoderBlock2D ---------------------------------------------------------

DownEncoderBlock2D::DownEncoderBlock2D(int64_t in_channels, int64_t out_channels, int64_t num_layers,
                                       int64_t groups, bool add_downsample)
    : Module("DownEncoderBlock2D") {
  for (int64_t i = 0; i < num_layers; ++i)
    resnets.push_back(
        std::make_unique<ResnetBlock2D>(i == 0 ? in_channels : out_channels, out_channels, groups));
  register_module("resnets", resnets);
  if (add_downsample) {
    downsamplers.push_back(std::make_unique<Downsample2D>(out_channels, out_channels));
    register_module("downsamplers", downsamplers);
  }
}

Tensor DownEncoderBlock2D::forward(const Tensor& x) {  // x [B, Cin, H, W]
  Tensor h = x;
  for (auto& r : resnets) h = (*r)(h);             // [B, Cout, H, W]
  for (auto& d : downsamplers) h = (*d)(h);        // [B, Cout, H/2, W/2]
  return h;
}

UpDecoderBlock2D::UpDecoderBlock2D(int64_t in_channels, int64_t out_channels, int64_t num_layers,
                                   int64_t groups, bool add_upsample)
    : Module("UpDecoderBlock2D") {
  for (int64_t i = 0; i < num_layers; ++i)
    resnets.push_back(
        std::make_unique<ResnetBlock2D>(i == 0 ? in_channels : out_channels, out_channels, groups));
  register_module("resnets", resnets);
  if (add_upsample) {
    upsamplers.push_back(std::make_unique<Upsample2D>(out_channels, out_channels));
    register_module("upsamplers", upsamplers);
  }
}

Tensor UpDecoderBlock2D::forward(const Tensor& x) {  // x [B, Cin, H, W]
  Tensor h = x;
  for (auto& r : resnets) h = (*r)(h);           // [B, Cout, H, W]
  for (auto& u : upsamplers) h = (*u)(h);        // [B, Cout, 2H, 2W]
  return h;
}

}  // namespace diffq::vae
