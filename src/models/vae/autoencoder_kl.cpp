#include "models/vae/autoencoder_kl.h"

#include <fstream>

#include "diffq/error.h"
#include "io/diffusers_folder.h"
#include "ops/ops.h"

namespace diffq::vae {

namespace {
const AutoencoderKLConfig& validated(const AutoencoderKLConfig& c) {
  c.validate();
  return c;
}
}  // namespace

// ---- Encoder ---------------------------------------------------------------------------------------

Encoder::Encoder(const AutoencoderKLConfig& c)
    : Module("Encoder"),
      conv_in(c.in_channels, c.block_out_channels.front(), 3, 1, 1),
      mid_block(c.block_out_channels.back(), c.norm_num_groups, c.mid_block_add_attention),
      conv_norm_out(c.norm_num_groups, c.block_out_channels.back(), 1e-6),
      conv_out(c.block_out_channels.back(), 2 * c.latent_channels, 3, 1, 1) {
  register_module("conv_in", conv_in);
  int64_t out_ch = c.block_out_channels.front();
  const size_t n = c.block_out_channels.size();
  for (size_t i = 0; i < n; ++i) {
    const int64_t in_ch = out_ch;
    out_ch = c.block_out_channels[i];
    down_blocks.push_back(std::make_unique<DownEncoderBlock2D>(
        in_ch, out_ch, c.layers_per_block, c.norm_num_groups, /*add_downsample=*/i + 1 < n));
  }
  register_module("down_blocks", down_blocks);
  register_module("mid_block", mid_block);
  register_module("conv_norm_out", conv_norm_out);
  register_module("conv_out", conv_out);
}

// Runs body on x in the layout x's device prefers for its dtype: x moved to channels-last and the
// result back where that is channels-last (the images between are then [B, H, W, C]). The modules under
// m are relaid only when the layout changes (conv_in, set with them, says which they have).
namespace {
template <class Body>
Tensor in_preferred_layout(Module& m, const Conv2d& conv_in, const Tensor& x, const Body& body) {
  const ops::ImageLayout layout = preferred_image_layout(x);
  if (conv_in.layout != layout) use_image_layout(m, layout);
  if (layout == ops::ImageLayout::channels_first) return body(x);
  return ops::to_channels_first(body(ops::to_channels_last(x)));
}
}  // namespace

Tensor Encoder::forward(const Tensor& x) {  // x [B, in, H, W]
  return in_preferred_layout(*this, conv_in, x, [&](const Tensor& in) {
    Tensor h = conv_in(in);                   // [B, C0, H, W]
    for (auto& b : down_blocks) h = (*b)(h);  // [B, C_last, H/f, W/f]
    h = mid_block(h);                         // [B, C_last, H/f, W/f]
    h = conv_norm_out.with_silu(h);           // silu(norm(h)): [B, C_last, H/f, W/f]
    return conv_out(h);                       // [B, 2*latent, H/f, W/f]
  });
}

// ---- Decoder ---------------------------------------------------------------------------------------

Decoder::Decoder(const AutoencoderKLConfig& c)
    : Module("Decoder"),
      conv_in(c.latent_channels, c.block_out_channels.back(), 3, 1, 1),
      mid_block(c.block_out_channels.back(), c.norm_num_groups, c.mid_block_add_attention),
      conv_norm_out(c.norm_num_groups, c.block_out_channels.front(), 1e-6),
      conv_out(c.block_out_channels.front(), c.out_channels, 3, 1, 1) {
  register_module("conv_in", conv_in);
  register_module("mid_block", mid_block);
  const size_t n = c.block_out_channels.size();
  int64_t out_ch = c.block_out_channels.back();
  for (size_t i = 0; i < n; ++i) {
    const int64_t in_ch = out_ch;
    out_ch = c.block_out_channels[n - 1 - i];  // reversed block_out_channels
    up_blocks.push_back(std::make_unique<UpDecoderBlock2D>(
        in_ch, out_ch, c.layers_per_block + 1, c.norm_num_groups, /*add_upsample=*/i + 1 < n));
  }
  register_module("up_blocks", up_blocks);
  register_module("conv_norm_out", conv_norm_out);
  register_module("conv_out", conv_out);
}

Tensor Decoder::forward(const Tensor& z) {  // z [B, latent, h, w]
  return in_preferred_layout(*this, conv_in, z, [&](const Tensor& in) {
    Tensor h = conv_in(in);                   // [B, C_last, h, w]
    h = mid_block(h);                         // [B, C_last, h, w]
    for (auto& b : up_blocks) h = (*b)(h);    // [B, C0, h*f, w*f]
    h = conv_norm_out.with_silu(h);           // silu(norm(h)): [B, C0, h*f, w*f]
    return conv_out(h);                       // [B, out, h*f, w*f]
  });
}

// ---- AutoencoderKL ---------------------------------------------------------------------------------

AutoencoderKL::AutoencoderKL(AutoencoderKLConfig cfg)
    : Module("AutoencoderKL"), encoder(validated(cfg)), decoder(cfg), cfg_(std::move(cfg)) {
  register_module("encoder", encoder);
  register_module("decoder", decoder);
  const int64_t L = cfg_.latent_channels;
  if (cfg_.use_quant_conv) {
    quant_conv = std::make_unique<Conv2d>(2 * L, 2 * L, 1, 1, 0);
    register_module("quant_conv", *quant_conv);
  }
  if (cfg_.use_post_quant_conv) {
    post_quant_conv = std::make_unique<Conv2d>(L, L, 1, 1, 0);
    register_module("post_quant_conv", *post_quant_conv);
  }
}

std::unique_ptr<AutoencoderKL> AutoencoderKL::from_pretrained(const std::filesystem::path& dir,
                                                              LoadOptions opt) {
  if (opt.source.empty()) opt.source = dir.string();
  if (std::filesystem::exists(dir / "model_index.json")) {
    auto folder = io::DiffusersFolder::open(dir);
    const auto& comp = folder.component("vae");
    check(comp.class_name == "AutoencoderKL", "vae", dir.string(), ": component vae is a ",
          comp.class_name, ", not an AutoencoderKL");
    auto m = std::make_unique<AutoencoderKL>(AutoencoderKLConfig::from_json(comp.config));
    m->load(folder.load_state_dict("vae"), opt);
    return m;
  }
  const auto cfg_path = dir / "config.json";
  check(std::filesystem::is_regular_file(cfg_path), "vae", "cannot open ", cfg_path.string(),
        " (expected an AutoencoderKL model folder or a pipeline folder)");
  nlohmann::json j = io::read_json_file(cfg_path, "vae");
  const std::string cls = j.value("_class_name", std::string("AutoencoderKL"));
  check(cls == "AutoencoderKL", "vae", cfg_path.string(), ": _class_name is ", cls,
        ", not AutoencoderKL");
  auto m = std::make_unique<AutoencoderKL>(
      AutoencoderKLConfig::from_json(io::JsonConfig(std::move(j), cfg_path.string())));
  m->load(io::load_weight_files(io::find_weight_files(dir)), opt);
  return m;
}

LoadReport AutoencoderKL::load(const StateDict& sd, const LoadOptions& opt) {
  return load_state_dict(*this, sd, opt);
}

Tensor AutoencoderKL::decode_forward(const Tensor& z) {  // z [B, latent, h, w]
  check(z.dim() == 4 && z.shape()[1] == cfg_.latent_channels, "vae.decode",
        "expected latents [B, ", cfg_.latent_channels, ", h, w], got ", shape_str(z.shape()));
  if (post_quant_conv) return decoder((*post_quant_conv)(z));  // [B, out, h*f, w*f]
  return decoder(z);                                           // [B, out, h*f, w*f]
}

DiagonalGaussian AutoencoderKL::encode_forward(const Tensor& x) {  // x [B, in, H, W]
  check(x.dim() == 4 && x.shape()[1] == cfg_.in_channels, "vae.encode", "expected images [B, ",
        cfg_.in_channels, ", H, W], got ", shape_str(x.shape()));
  Tensor moments = encoder(x);                          // [B, 2*latent, H/f, W/f]
  if (quant_conv) moments = (*quant_conv)(moments);     // [B, 2*latent, H/f, W/f]
  auto parts = moments.chunk(2, 1);                     // 2 x [B, latent, H/f, W/f] (views)
  return {parts[0].contiguous(), ops::clamp(parts[1], -30.0, 20.0)};
}

}  // namespace diffq::vae
