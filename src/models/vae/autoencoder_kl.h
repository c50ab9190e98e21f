// AutoencoderKL (diffusers models/autoencoders/autoencoder_kl.py + vae.py Encoder/Decoder): the image
// VAE of Stable Diffusion and FLUX.1. decode() maps latents to images, encode() maps images to the
// diagonal Gaussian posterior's mean and log-variance. No latent scaling here: pipelines apply
// z = latents / scaling_factor + shift_factor themselves.
//
// force_upcast: Diffusers' SD/SDXL pipelines cast the VAE to float32 for decoding when it is float16
// and force_upcast is set, because the fp16 activations of those VAEs overflow. FLUX.1's pipeline does
// not upcast (it decodes in the VAE's dtype, bf16, whose range is float32's); we follow the caller's
// dtype and expose the flag for pipelines that must honour it.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>

#include "models/vae/blocks.h"
#include "models/vae/config.h"
#include "modules/state_dict.h"

namespace diffq::vae {

class Encoder : public Module {
 public:
  explicit Encoder(const AutoencoderKLConfig& cfg);
  Tensor operator()(const Tensor& x) { return call([&] { return forward(x); }); }
  Tensor forward(const Tensor& x);  // [B, in, H, W] -> [B, 2*latent, H/f, W/f] (moments)

  Conv2d conv_in;
  ModuleList<DownEncoderBlock2D> down_blocks;
  UNetMidBlock2D mid_block;
  GroupNorm conv_norm_out;
  Conv2d conv_out;
};

class Decoder : public Module {
 public:
  explicit Decoder(const AutoencoderKLConfig& cfg);
  Tensor operator()(const Tensor& z) { return call([&] { return forward(z); }); }
  Tensor forward(const Tensor& z);  // [B, latent, h, w] -> [B, out, h*f, w*f]

  Conv2d conv_in;
  UNetMidBlock2D mid_block;
  ModuleList<UpDecoderBlock2D> up_blocks;
  GroupNorm conv_norm_out;
  Conv2d conv_out;
};

// DiagonalGaussianDistribution's parameters: moments chunked in two along channels, logvar clamped
// to [-30, 20] as Diffusers does.
struct DiagonalGaussian {
  Tensor mean;    // [B, latent, h, w]
  Tensor logvar;  // [B, latent, h, w]
};

class AutoencoderKL : public Module {
 public:
  explicit AutoencoderKL(AutoencoderKLConfig cfg);

  // Builds the module from <dir>/config.json and loads <dir>'s weights (a model folder such as a
  // pipeline's vae/, or a pipeline folder, whose "vae" component is used). opt.source defaults to dir.
  static std::unique_ptr<AutoencoderKL> from_pretrained(const std::filesystem::path& dir,
                                                        LoadOptions opt = {});
  LoadReport load(const StateDict& sd, const LoadOptions& opt = {});

  Tensor decode(const Tensor& z) {  // [B, latent, h, w] -> [B, out, h*f, w*f], f = vae_scale_factor
    return call([&] { return decode_forward(z); });
  }
  DiagonalGaussian encode(const Tensor& x) {  // [B, in, H, W] -> mean, logvar [B, latent, H/f, W/f]
    return call([&] { return encode_forward(x); });
  }
  Tensor decode_forward(const Tensor& z);
  DiagonalGaussian encode_forward(const Tensor& x);

  const AutoencoderKLConfig& config() const { return cfg_; }

  Encoder encoder;
  Decoder decoder;
  std::unique_ptr<Conv2d> quant_conv;       // 1x1, 2*latent -> 2*latent, when use_quant_conv
  std::unique_ptr<Conv2d> post_quant_conv;  // 1x1, latent -> latent, when use_post_quant_conv

 private:
  AutoencoderKLConfig cfg_;
};

}  // namespace diffq::vae
