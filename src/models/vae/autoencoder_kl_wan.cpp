#include "models/vae/autoencoder_kl_wan.h"

#include <fstream>

#include "diffq/error.h"
#include "io/diffusers_folder.h"
#include "models/vae/wan_vae_tiling.h"
#include "ops/ops.h"

namespace diffq::vae {

// ---- config -----------------------------------------------------------------------------------------

AutoencoderKLWanConfig::AutoencoderKLWanConfig()
    : latents_mean{-0.7571, -0.7089, -0.9113, 0.1075, -0.1745, 0.9653, -0.1517, 1.5508,
                   0.4134,  -0.0715, 0.5517,  -0.3632, -0.1922, -0.9497, 0.2503, -0.2921},
      latents_std{2.8184, 1.4541, 2.3275, 2.6558, 1.2196, 1.7708, 2.6052, 2.0743,
                  3.2687, 2.1526, 2.8652, 1.5579, 1.6382, 1.1253, 2.8251, 1.9160} {}

int64_t AutoencoderKLWanConfig::temporal_doublings() const {
  int64_t n = 0;
  for (bool b : temperal_downsample) n += b ? 1 : 0;
  return n;
}

AutoencoderKLWanConfig AutoencoderKLWanConfig::from_json(const io::JsonConfig& j) {
  AutoencoderKLWanConfig c;
  const std::string src = j.source().empty() ? "AutoencoderKLWan config" : j.source();
  c.base_dim = j.get<int64_t>("base_dim", c.base_dim);
  if (j.has("decoder_base_dim")) c.decoder_base_dim = j.get<int64_t>("decoder_base_dim", 0);
  c.z_dim = j.get<int64_t>("z_dim", c.z_dim);
  c.dim_mult = j.get<std::vector<int64_t>>("dim_mult", c.dim_mult);
  c.num_res_blocks = j.get<int64_t>("num_res_blocks", c.num_res_blocks);
  c.attn_scales = j.get<std::vector<double>>("attn_scales", c.attn_scales);
  if (j.has("temperal_downsample")) {
    const auto& a = j.json()["temperal_downsample"];
    check(a.is_array(), "vae", src, ": temperal_downsample is not a list of booleans");
    c.temperal_downsample.clear();
    for (const auto& v : a) {
      check(v.is_boolean(), "vae", src, ": temperal_downsample entry ", v.dump(), " is not a boolean");
      c.temperal_downsample.push_back(v.get<bool>());
    }
  }
  c.dropout = j.get<double>("dropout", c.dropout);
  c.latents_mean = j.get<std::vector<double>>("latents_mean", c.latents_mean);
  c.latents_std = j.get<std::vector<double>>("latents_std", c.latents_std);
  c.is_residual = j.get<bool>("is_residual", c.is_residual);
  c.in_channels = j.get<int64_t>("in_channels", c.in_channels);
  c.out_channels = j.get<int64_t>("out_channels", c.out_channels);
  if (j.has("patch_size")) c.patch_size = j.get<int64_t>("patch_size", 1);
  c.scale_factor_temporal = j.get<int64_t>("scale_factor_temporal", c.scale_factor_temporal);
  c.scale_factor_spatial = j.get<int64_t>("scale_factor_spatial", c.scale_factor_spatial);
  c.validate(src);
  return c;
}

void AutoencoderKLWanConfig::validate(const std::string& src) const {
  check(base_dim > 0 && decoder_dim() > 0 && z_dim > 0 && num_res_blocks >= 0, "vae", src,
        ": base_dim, decoder_base_dim, z_dim must be positive");
  check(!dim_mult.empty(), "vae", src, ": dim_mult is empty");
  check(temperal_downsample.size() + 1 >= dim_mult.size(), "vae", src, ": temperal_downsample has ",
        temperal_downsample.size(), " entries for ", dim_mult.size(), " levels (need ", dim_mult.size() - 1, ")");
  check(!patch_size || *patch_size >= 1, "vae", src, ": patch_size must be >= 1");
  check(in_channels > 0 && out_channels > 0 && in_channels % (patch() * patch()) == 0 &&
            out_channels % (patch() * patch()) == 0,
        "vae", src, ": in_channels ", in_channels, " and out_channels ", out_channels,
        " must be positive multiples of patch_size^2 (they count the patchified channels)");
}

// ---- encoder / decoder ------------------------------------------------------------------------------

WanEncoder3d::WanEncoder3d(const AutoencoderKLWanConfig& c)
    : Module("WanEncoder3d"),
      conv_in(c.in_channels, c.base_dim, 3, 1),
      mid_block(c.base_dim * c.dim_mult.back()),
      norm_out(c.base_dim * c.dim_mult.back(), false),
      conv_out(c.base_dim * c.dim_mult.back(), 2 * c.z_dim, 3, 1) {
  std::vector<int64_t> dims = {c.base_dim};
  for (int64_t m : c.dim_mult) dims.push_back(c.base_dim * m);
  const size_t levels = c.dim_mult.size();
  double scale = 1.0;
  for (size_t i = 0; i < levels; ++i) {
    int64_t in_dim = dims[i];
    const int64_t out_dim = dims[i + 1];
    const bool last = i + 1 == levels;
    if (c.is_residual) {
      down_blocks.push_back(std::make_unique<WanResidualDownBlock>(
          in_dim, out_dim, c.num_res_blocks, !last && c.temperal_downsample[i], !last));
      continue;
    }
    for (int64_t r = 0; r < c.num_res_blocks; ++r) {
      down_blocks.push_back(std::make_unique<WanResidualBlock>(in_dim, out_dim));
      for (double s : c.attn_scales)
        if (s == scale) {
          down_blocks.push_back(std::make_unique<WanAttentionBlock>(out_dim));
          break;
        }
      in_dim = out_dim;
    }
    if (!last) {
      down_blocks.push_back(std::make_unique<WanResample>(
          out_dim, c.temperal_downsample[i] ? WanResampleMode::downsample3d : WanResampleMode::downsample2d));
      scale /= 2.0;
    }
  }
  register_module("conv_in", conv_in);
  register_module("down_blocks", down_blocks);
  register_module("mid_block", mid_block);
  register_module("norm_out", norm_out);
  register_module("conv_out", conv_out);
}

Tensor WanEncoder3d::forward(const Tensor& x, WanFeatCache& cache) {  // x [t, Cin, H, W]
  Tensor h = cached_conv(conv_in, x, cache);                          // [t, dims0, H, W]
  for (auto& b : down_blocks) h = (*b)(h, cache);                     // [t', dims_last, H/f, W/f]
  h = mid_block(h, cache);
  h = norm_out.with_silu(h);
  return cached_conv(conv_out, h, cache);  // [t', 2z, H/f, W/f]
}

WanDecoder3d::WanDecoder3d(const AutoencoderKLWanConfig& c)
    : Module("WanDecoder3d"),
      conv_in(c.z_dim, c.decoder_dim() * c.dim_mult.back(), 3, 1),
      mid_block(c.decoder_dim() * c.dim_mult.back()),
      norm_out(c.decoder_dim() * c.dim_mult.front(), false),
      conv_out(c.decoder_dim() * c.dim_mult.front(), c.out_channels, 3, 1) {
  const int64_t base = c.decoder_dim();
  const size_t levels = c.dim_mult.size();
  std::vector<int64_t> dims = {base * c.dim_mult.back()};
  for (size_t i = levels; i-- > 0;) dims.push_back(base * c.dim_mult[i]);
  // temperal_upsample = temperal_downsample reversed
  std::vector<bool> up(c.temperal_downsample.rbegin(), c.temperal_downsample.rend());
  for (size_t i = 0; i < levels; ++i) {
    int64_t in_dim = dims[i];
    const int64_t out_dim = dims[i + 1];
    if (i > 0 && !c.is_residual) in_dim /= 2;  // Wan2.1: the previous upsampler halved the channels
    const bool up_flag = i + 1 != levels;
    if (c.is_residual) {
      up_blocks.push_back(std::make_unique<WanResidualUpBlock>(in_dim, out_dim, c.num_res_blocks,
                                                               up_flag && up[i], up_flag));
    } else {
      const WanResampleMode mode = !up_flag ? WanResampleMode::none
                                   : up[i]  ? WanResampleMode::upsample3d
                                            : WanResampleMode::upsample2d;
      up_blocks.push_back(std::make_unique<WanUpBlock>(in_dim, out_dim, c.num_res_blocks, mode));
    }
  }
  register_module("conv_in", conv_in);
  register_module("mid_block", mid_block);
  register_module("up_blocks", up_blocks);
  register_module("norm_out", norm_out);
  register_module("conv_out", conv_out);
}

Tensor WanDecoder3d::forward(const Tensor& z, WanFeatCache& cache, bool first_chunk) {  // z [1, z, h, w]
  Tensor h = cached_conv(conv_in, z, cache);                 // [1, C, h, w]
  h = mid_block(h, cache);
  for (auto& b : up_blocks) h = (*b)(h, cache, first_chunk);  // [t, C0, h*f, w*f]
  h = norm_out.with_silu(h);
  return cached_conv(conv_out, h, cache);  // [t, out*p^2, h*f, w*f]
}

// ---- patchify ---------------------------------------------------------------------------------------

Tensor wan_patchify(const Tensor& x, int64_t p) {  // x [T, C, H, W]
  if (p == 1) return x;
  const int64_t T = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  check(H % p == 0 && W % p == 0, "vae.encode", "height ", H, " and width ", W, " must be divisible by patch_size ", p);
  return x.contiguous()
      .view({T, C, H / p, p, W / p, p})  // [T, C, h, ph, w, pw]
      .permute({0, 1, 5, 3, 2, 4})       // [T, C, pw, ph, h, w]
      .contiguous()
      .view({T, C * p * p, H / p, W / p});
}

Tensor wan_unpatchify(const Tensor& x, int64_t p) {  // x [T, C*p*p, h, w]
  if (p == 1) return x;
  const int64_t T = x.size(0), C = x.size(1) / (p * p), h = x.size(2), w = x.size(3);
  return x.contiguous()
      .view({T, C, p, p, h, w})       // [T, C, pw, ph, h, w]
      .permute({0, 1, 4, 3, 5, 2})    // [T, C, h, ph, w, pw]
      .contiguous()
      .view({T, C, h * p, w * p});
}

// ---- AutoencoderKLWan -------------------------------------------------------------------------------

namespace {
const AutoencoderKLWanConfig& validated(const AutoencoderKLWanConfig& c) {
  c.validate();
  return c;
}

// One sample of a Diffusers video [C, F, H, W] (a view) as frames [F, C, H, W], contiguous.
Tensor to_frames(const Tensor& v) { return v.permute({1, 0, 2, 3}).contiguous(); }
}  // namespace

AutoencoderKLWan::AutoencoderKLWan(AutoencoderKLWanConfig cfg)
    : Module("AutoencoderKLWan"),
      encoder(validated(cfg)),
      quant_conv(2 * cfg.z_dim, 2 * cfg.z_dim, 1),
      post_quant_conv(cfg.z_dim, cfg.z_dim, 1),
      decoder(cfg),
      cfg_(std::move(cfg)) {
  register_module("encoder", encoder);
  register_module("quant_conv", quant_conv);
  register_module("post_quant_conv", post_quant_conv);
  register_module("decoder", decoder);
}

std::unique_ptr<AutoencoderKLWan> AutoencoderKLWan::from_pretrained(const std::filesystem::path& dir,
                                                                    LoadOptions opt) {
  if (opt.source.empty()) opt.source = dir.string();
  if (std::filesystem::exists(dir / "model_index.json")) {
    auto folder = io::DiffusersFolder::open(dir);
    const auto& comp = folder.component("vae");
    check(comp.class_name == "AutoencoderKLWan", "vae", dir.string(), ": component vae is a ", comp.class_name,
          ", not an AutoencoderKLWan");
    auto m = std::make_unique<AutoencoderKLWan>(AutoencoderKLWanConfig::from_json(comp.config));
    m->load(folder.load_state_dict("vae"), opt);
    return m;
  }
  const auto cfg_path = dir / "config.json";
  check(std::filesystem::is_regular_file(cfg_path), "vae", "cannot open ", cfg_path.string(),
        " (expected an AutoencoderKLWan model folder or a pipeline folder)");
  nlohmann::json j = io::read_json_file(cfg_path, "vae");
  const std::string cls = j.value("_class_name", std::string("AutoencoderKLWan"));
  check(cls == "AutoencoderKLWan", "vae", cfg_path.string(), ": _class_name is ", cls, ", not AutoencoderKLWan");
  auto m = std::make_unique<AutoencoderKLWan>(
      AutoencoderKLWanConfig::from_json(io::JsonConfig(std::move(j), cfg_path.string())));
  m->load(io::load_weight_files(io::find_weight_files(dir)), opt);
  return m;
}

LoadReport AutoencoderKLWan::load(const StateDict& sd, const LoadOptions& opt) {
  LoadReport r = load_state_dict(*this, sd, opt);
  prepare();
  return r;
}

void AutoencoderKLWan::prepare() {
  for (auto& [name, mod] : named_modules())
    if (auto* conv = dynamic_cast<WanCausalConv3d*>(mod)) conv->prepare();
}

DType AutoencoderKLWan::dtype() const { return decoder.conv_out.weight.dtype(); }

void AutoencoderKLWan::enable_tiling(int64_t tile_h, int64_t tile_w, int64_t stride_h, int64_t stride_w) {
  check(tile_h > 0 && tile_w > 0 && stride_h > 0 && stride_w > 0, "vae.enable_tiling",
        "tile sizes and strides must be positive, got ", tile_h, "x", tile_w, " / ", stride_h, "x", stride_w);
  tiling_ = true;
  tile_h_ = tile_h, tile_w_ = tile_w, stride_h_ = stride_h, stride_w_ = stride_w;
}

void AutoencoderKLWan::decode_frames(const Tensor& x, const std::function<void(const Tensor&, int64_t)>& sink) {
  const int64_t T = x.size(0), later = int64_t{1} << cfg_.temporal_doublings();
  WanFeatCache cache;
  int64_t f0 = 0;
  for (int64_t i = 0; i < T; ++i) {
    cache.start_chunk();
    const Tensor y = decoder(x.slice(0, i, i + 1), cache, i == 0);  // [t, out*p^2, h*f/p, w*f/p]
    check(y.size(0) == (i == 0 ? 1 : later), "vae.decode", "latent frame ", i, " decoded to ", y.size(0),
          " frames, expected ", i == 0 ? 1 : later);
    sink(y, f0);
    f0 += y.size(0);
  }
}

Tensor AutoencoderKLWan::decode_forward(const Tensor& z) {  // z [B, z_dim, T, h, w]
  check(z.dim() == 5 && z.size(1) == cfg_.z_dim && z.size(2) >= 1, "vae.decode", "expected latents [B, ",
        cfg_.z_dim, ", T, h, w], got ", shape_str(z.shape()));
  const int64_t B = z.size(0), T = z.size(2), h = z.size(3), w = z.size(4), f = cfg_.spatial_factor();
  const int64_t p = cfg_.patch(), later = int64_t{1} << cfg_.temporal_doublings();
  const int64_t F = 1 + later * (T - 1), H = h * f, W = w * f;
  const DType dt = dtype();
  Tensor out = Tensor::empty({B, cfg_.video_out_channels(), F, H, W}, dt, z.device());  // [B, out, F, H, W]
  // Diffusers tiles when the latent exceeds tile_sample_min / spatial_compression_ratio.
  const int64_t r = cfg_.scale_factor_spatial;
  const bool tiled = tiling_ && (w > tile_w_ / r || h > tile_h_ / r);
  for (int64_t b = 0; b < B; ++b) {
    Tensor zb = to_frames(z.select(0, b));  // [T, z, h, w]
    if (zb.dtype() != dt) zb = ops::cast(zb, dt);
    const Tensor x = post_quant_conv(zb);   // [T, z, h, w]
    zb = Tensor();
    const Tensor ob = out.select(0, b);     // [out, F, H, W]
    if (!tiled) {
      decode_frames(x, [&](const Tensor& y, int64_t f0) {  // y [t, out*p^2, H/p, W/p]
        check(y.size(2) * p == H && y.size(3) * p == W, "vae.decode", "decoded ", shape_str(y.shape()),
              ", expected frames of ", H, "x", W);
        const Tensor v = ops::clamp(wan_unpatchify(y, p), -1.0, 1.0);  // [t, out, H, W]
        ops::copy_into(v.permute({1, 0, 2, 3}), ob.slice(1, f0, f0 + v.size(0)));  // out[b, :, f0:f0+t]
      });
      continue;
    }
    // tiled_decode: latent tiles of tile / r with stride stride / r; pieces and blending in the
    // decoder's (patchified) output pixels.
    const int64_t tlh = tile_h_ / r, tlw = tile_w_ / r, slh = stride_h_ / r, slw = stride_w_ / r;
    check(slh > 0 && slw > 0, "vae.decode", "tile strides ", stride_h_, "x", stride_w_,
          " are below the spatial compression ratio ", r);
    const int64_t ssh = stride_h_ / p, ssw = stride_w_ / p;
    WanTileBlender blender(tile_h_ / p - ssh, tile_w_ / p - ssw, ssh, ssw);
    const int64_t Hp = H / p, Wp = W / p;  // the assembled video in the decoder's pixels
    const auto rows = wan_tile_starts(h, slh), cols = wan_tile_starts(w, slw);
    int64_t y0 = 0;
    for (size_t ti = 0; ti < rows.size(); ++ti) {
      int64_t x0 = 0, piece_h = 0;
      for (size_t tj = 0; tj < cols.size(); ++tj) {
        const Tensor xt = x.slice(2, rows[ti], std::min(h, rows[ti] + tlh))
                              .slice(3, cols[tj], std::min(w, cols[tj] + tlw));  // [T, z, th, tw]
        Tensor tile;  // [F, out*p^2, th*f/p, tw*f/p], unclamped
        decode_frames(xt, [&](const Tensor& y, int64_t f0) {
          if (!tile.defined()) tile = Tensor::empty({F, y.size(1), y.size(2), y.size(3)}, dt, z.device());
          ops::copy_into(y, tile.slice(0, f0, f0 + y.size(0)));
        });
        const Tensor piece = blender.add(int64_t(ti), int64_t(tj), tile);  // [F, out*p^2, ph, pw]
        piece_h = piece.size(2);
        // Pieces are laid side by side; the assembled video is cropped to Hp x Wp.
        const int64_t ch = std::min(piece.size(2), Hp - y0), cw = std::min(piece.size(3), Wp - x0);
        if (ch > 0 && cw > 0) {
          const Tensor v = ops::clamp(wan_unpatchify(piece.slice(2, 0, ch).slice(3, 0, cw), p), -1.0, 1.0);
          ops::copy_into(v.permute({1, 0, 2, 3}),  // [out, F, ch*p, cw*p]
                         ob.slice(2, y0 * p, (y0 + ch) * p).slice(3, x0 * p, (x0 + cw) * p));
        }
        x0 += piece.size(3);
        tile = Tensor();
      }
      y0 += piece_h;
    }
  }
  return out;
}

Tensor AutoencoderKLWan::encode_frames(const Tensor& x) {  // x [F, in*p^2, H, W] (patchified)
  const int64_t F = x.size(0), chunks = 1 + (F - 1) / 4;
  WanFeatCache cache;
  std::vector<Tensor> parts;
  for (int64_t i = 0; i < chunks; ++i) {
    cache.start_chunk();
    const int64_t s = i == 0 ? 0 : 1 + 4 * (i - 1), e = i == 0 ? 1 : 1 + 4 * i;
    parts.push_back(encoder(x.slice(0, s, e), cache));  // [t', 2z, h, w]
  }
  cache.clear();
  return quant_conv(parts.size() == 1 ? parts[0] : ops::concat(parts, 0));  // [T, 2z, h, w]
}

Tensor AutoencoderKLWan::encode_forward(const Tensor& x) {  // x [B, in, F, H, W]
  check(x.dim() == 5 && x.size(1) == cfg_.video_in_channels() && x.size(2) >= 1, "vae.encode", "expected videos [B, ",
        cfg_.video_in_channels(), ", F, H, W], got ", shape_str(x.shape()));
  const int64_t B = x.size(0), H = x.size(3), W = x.size(4), p = cfg_.patch();
  const DType dt = dtype();
  // Diffusers tiles when the (unpatchified) video exceeds tile_sample_min.
  const bool tiled = tiling_ && (W > tile_w_ || H > tile_h_);
  std::vector<Tensor> samples;
  for (int64_t b = 0; b < B; ++b) {
    Tensor frames = to_frames(x.select(0, b));  // [F, in, H, W]
    if (frames.dtype() != dt) frames = ops::cast(frames, dt);
    frames = wan_patchify(frames, p);           // [F, in*p^2, H/p, W/p]
    Tensor h;                                   // [T, 2z, h, w]
    if (!tiled) {
      h = encode_frames(frames);
    } else {
      // tiled_encode: tiles of the patchified video (tile / stride in its pixels), latent tiles of
      // tile / (r / p), blended there.
      const int64_t er = cfg_.scale_factor_spatial / p;
      check(er > 0 && stride_h_ / er > 0 && stride_w_ / er > 0, "vae.encode", "tile strides ", stride_h_, "x",
            stride_w_, " are below the encoder's compression ratio ", er);
      const int64_t Hp = frames.size(2), Wp = frames.size(3), lh = Hp / er, lw = Wp / er;
      const int64_t slh = stride_h_ / er, slw = stride_w_ / er;
      WanTileBlender blender(tile_h_ / er - slh, tile_w_ / er - slw, slh, slw);
      const auto rows = wan_tile_starts(Hp, stride_h_), cols = wan_tile_starts(Wp, stride_w_);
      int64_t y0 = 0;
      for (size_t ti = 0; ti < rows.size(); ++ti) {
        int64_t x0 = 0, piece_h = 0;
        for (size_t tj = 0; tj < cols.size(); ++tj) {
          const Tensor xt = frames.slice(2, rows[ti], std::min(Hp, rows[ti] + tile_h_))
                                .slice(3, cols[tj], std::min(Wp, cols[tj] + tile_w_))
                                .contiguous();  // [F, in*p^2, th, tw]
          Tensor tile = encode_frames(xt);      // [T, 2z, th/er, tw/er]
          if (!tile.is_contiguous()) tile = tile.contiguous();
          if (!h.defined()) h = Tensor::empty({tile.size(0), tile.size(1), lh, lw}, tile.dtype(), tile.device());
          const Tensor piece = blender.add(int64_t(ti), int64_t(tj), tile);
          piece_h = piece.size(2);
          const int64_t ch = std::min(piece.size(2), lh - y0), cw = std::min(piece.size(3), lw - x0);
          if (ch > 0 && cw > 0)
            ops::copy_into(piece.slice(2, 0, ch).slice(3, 0, cw), h.slice(2, y0, y0 + ch).slice(3, x0, x0 + cw));
          x0 += piece.size(3);
        }
        y0 += piece_h;
      }
    }
    samples.push_back(h.permute({1, 0, 2, 3}).unsqueeze(0));  // [1, 2z, T, h, w]
  }
  return samples.size() == 1 ? samples[0].contiguous() : ops::concat(samples, 0);
}

}  // namespace diffq::vae
