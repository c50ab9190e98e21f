#include "models/vae/config.h"

#include "diffq/error.h"

namespace diffq::vae {

AutoencoderKLConfig AutoencoderKLConfig::from_json(const io::JsonConfig& j) {
  AutoencoderKLConfig c;
  c.in_channels = j.get<int64_t>("in_channels", c.in_channels);
  c.out_channels = j.get<int64_t>("out_channels", c.out_channels);
  c.down_block_types = j.get<std::vector<std::string>>("down_block_types", c.down_block_types);
  c.up_block_types = j.get<std::vector<std::string>>("up_block_types", c.up_block_types);
  c.block_out_channels = j.get<std::vector<int64_t>>("block_out_channels", c.block_out_channels);
  c.layers_per_block = j.get<int64_t>("layers_per_block", c.layers_per_block);
  c.act_fn = j.get<std::string>("act_fn", c.act_fn);
  c.latent_channels = j.get<int64_t>("latent_channels", c.latent_channels);
  c.norm_num_groups = j.get<int64_t>("norm_num_groups", c.norm_num_groups);
  // sample_size may be a list ([h, w]) in some checkpoints; only the tiling default uses it.
  if (j.has("sample_size") && j.json()["sample_size"].is_number_integer())
    c.sample_size = j.get<int64_t>("sample_size", c.sample_size);
  c.scaling_factor = j.get<double>("scaling_factor", c.scaling_factor);
  if (j.has("shift_factor")) c.shift_factor = j.get<double>("shift_factor", 0.0);
  c.force_upcast = j.get<bool>("force_upcast", c.force_upcast);
  c.use_quant_conv = j.get<bool>("use_quant_conv", c.use_quant_conv);
  c.use_post_quant_conv = j.get<bool>("use_post_quant_conv", c.use_post_quant_conv);
  c.mid_block_add_attention = j.get<bool>("mid_block_add_attention", c.mid_block_add_attention);
  c.validate(j.source().empty() ? "AutoencoderKL config" : j.source());
  return c;
}

void AutoencoderKLConfig::validate(const std::string& source) const {
  const std::string ctx = "vae";
  check(!block_out_channels.empty(), ctx, source, ": block_out_channels is empty");
  check(down_block_types.size() == block_out_channels.size(), ctx, source, ": ",
        down_block_types.size(), " down_block_types for ", block_out_channels.size(),
        " block_out_channels");
  check(up_block_types.size() == block_out_channels.size(), ctx, source, ": ", up_block_types.size(),
        " up_block_types for ", block_out_channels.size(), " block_out_channels");
  for (const auto& t : down_block_types)
    check(t == "DownEncoderBlock2D", ctx, source, ": down block type '", t,
          "' is not supported (only DownEncoderBlock2D)");
  for (const auto& t : up_block_types)
    check(t == "UpDecoderBlock2D", ctx, source, ": up block type '", t,
          "' is not supported (only UpDecoderBlock2D)");
  check(act_fn == "silu", ctx, source, ": act_fn '", act_fn, "' is not supported (only silu)");
  check(in_channels > 0 && out_channels > 0 && latent_channels > 0 && layers_per_block > 0, ctx,
        source, ": channel counts and layers_per_block must be positive");
  check(norm_num_groups > 0, ctx, source, ": norm_num_groups must be positive");
  for (int64_t c : block_out_channels)
    check(c > 0 && c % norm_num_groups == 0, ctx, source, ": block_out_channels entry ", c,
          " is not a positive multiple of norm_num_groups ", norm_num_groups);
}

}  // namespace diffq::vae
