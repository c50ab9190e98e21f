#include "models/vae/wan_vae_blocks.h"

#include <cmath>

#include "diffq/error.h"
#include "ops/ops.h"

namespace diffq::vae {

// ---- WanRMS_norm ------------------------------------------------------------------------------------

WanRMSNorm::WanRMSNorm(int64_t d, bool images)
    : Module("WanRMS_norm"), dim(d), gamma(images ? Shape{d, 1, 1} : Shape{d, 1, 1, 1}) {
  register_parameter("gamma", gamma);
}

Tensor WanRMSNorm::forward(const Tensor& x) {  // x [N, C, H, W]
  // F.normalize(x.float(), dim=1) * sqrt(dim) * gamma (+ bias 0.0), in one op.
  return ops::channel_norm(x, gamma.dense().view({dim}), std::sqrt(double(dim)), 1e-12);  // [N, C, H, W]
}

Tensor WanRMSNorm::forward_silu(const Tensor& x) {
  return ops::channel_norm_silu(x, gamma.dense().view({dim}), std::sqrt(double(dim)), 1e-12);
}

// ---- WanResidualBlock -------------------------------------------------------------------------------

WanResidualBlock::WanResidualBlock(int64_t in_dim, int64_t out_dim)
    : WanBlock("WanResidualBlock"),
      norm1(in_dim, false),
      conv1(in_dim, out_dim, 3, 1),
      norm2(out_dim, false),
      conv2(out_dim, out_dim, 3, 1) {
  register_module("norm1", norm1);
  register_module("conv1", conv1);
  register_module("norm2", norm2);
  register_module("conv2", conv2);
  if (in_dim != out_dim) {
    conv_shortcut = std::make_unique<WanCausalConv3d>(in_dim, out_dim, 1);
    register_module("conv_shortcut", *conv_shortcut);
  }
}

Tensor WanResidualBlock::forward(const Tensor& x, WanFeatCache& cache, bool) {  // x [T, Cin, H, W]
  const Tensor h = conv_shortcut ? (*conv_shortcut)(x) : x;  // [T, Cout, H, W]
  Tensor y = norm1.with_silu(x);                             // silu(norm1(x)): [T, Cin, H, W]
  y = cached_conv(conv1, y, cache);                          // [T, Cout, H, W]
  y = norm2.with_silu(y);                                    // [T, Cout, H, W]
  return cached_conv(conv2, y, cache, h);                    // h + conv2(y): [T, Cout, H, W]
}

// ---- WanAttentionBlock ------------------------------------------------------------------------------

WanAttentionBlock::WanAttentionBlock(int64_t dim)
    : WanBlock("WanAttentionBlock"), norm(dim, true), to_qkv(dim, 3 * dim, 1), proj(dim, dim, 1) {
  register_module("norm", norm);
  register_module("to_qkv", to_qkv);
  register_module("proj", proj);
}

Tensor WanAttentionBlock::forward(const Tensor& x, WanFeatCache&, bool) {  // x [T, C, H, W]
  const int64_t T = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  Tensor qkv = to_qkv(norm(x))                          // [T, 3C, H, W]
                   .view({T, 3 * C, H * W})             // [T, 3C, S]
                   .transpose(1, 2)                     // [T, S, 3C]
                   .contiguous()
                   .unsqueeze(1);                       // [T, 1, S, 3C]: one head
  auto parts = qkv.chunk(3, -1);                        // q, k, v [T, 1, S, C] (views)
  Tensor q = parts[0].contiguous(), k = parts[1].contiguous(), v = parts[2].contiguous();
  qkv = Tensor();
  parts.clear();
  // In f32 whatever x's dtype: a single head at the lowest resolution costs ~0.1% of a decode, and
  // bf16 probabilities (torch's CPU flash attention rounds P, after its own approximate exp) put these
  // tiny test VAEs 2x further from the fp32 reference than Diffusers' bf16 run; f32 keeps them within.
  const DType dt = q.dtype();
  if (dt != DType::f32) q = ops::cast(q, DType::f32), k = ops::cast(k, DType::f32), v = ops::cast(v, DType::f32);
  Tensor a = ops::sdpa(q, k, v);                        // [T, 1, S, C]
  if (dt != DType::f32) a = ops::cast(a, dt);
  q = k = v = Tensor();
  a = a.squeeze(1).transpose(1, 2).reshape({T, C, H, W});  // [T, C, H, W]
  return ops::add(proj(a), x);
}

// ---- WanResample ------------------------------------------------------------------------------------

WanResampleConv::WanResampleConv(int64_t in, int64_t out, int64_t stride, ops::Conv2dPad pad)
    : Module("Sequential"), conv(in, out, 3, stride, pad) {
  register_module("1", conv);
}

WanResampleMode wan_resample_mode(const std::string& n) {
  if (n == "upsample2d") return WanResampleMode::upsample2d;
  if (n == "upsample3d") return WanResampleMode::upsample3d;
  if (n == "downsample2d") return WanResampleMode::downsample2d;
  if (n == "downsample3d") return WanResampleMode::downsample3d;
  return WanResampleMode::none;
}

WanResample::WanResample(int64_t d, WanResampleMode m, int64_t upsample_out_dim)
    : WanBlock("WanResample"), dim(d), mode(m) {
  const int64_t up_out = upsample_out_dim < 0 ? d / 2 : upsample_out_dim;
  switch (m) {
    case WanResampleMode::upsample2d:
    case WanResampleMode::upsample3d:
      resample = std::make_unique<WanResampleConv>(d, up_out, 1, ops::Conv2dPad{1, 1, 1, 1});
      break;
    case WanResampleMode::downsample2d:
    case WanResampleMode::downsample3d:
      resample = std::make_unique<WanResampleConv>(d, d, 2, ops::Conv2dPad{0, 1, 0, 1});
      break;
    case WanResampleMode::none: break;
  }
  if (resample) register_module("resample", *resample);
  if (m == WanResampleMode::upsample3d) {
    time_conv = std::make_unique<WanCausalConv3d>(d, 2 * d, std::array<int64_t, 3>{3, 1, 1},
                                                  std::array<int64_t, 3>{1, 1, 1}, std::array<int64_t, 3>{1, 0, 0});
    register_module("time_conv", *time_conv);
  } else if (m == WanResampleMode::downsample3d) {
    time_conv = std::make_unique<WanCausalConv3d>(d, d, std::array<int64_t, 3>{3, 1, 1},
                                                  std::array<int64_t, 3>{2, 1, 1}, std::array<int64_t, 3>{0, 0, 0});
    register_module("time_conv", *time_conv);
  }
}

Tensor WanResample::forward(const Tensor& x_in, WanFeatCache& cache, bool) {  // x [T, C, H, W]
  using State = WanFeatCache::State;
  Tensor x = x_in;
  if (mode == WanResampleMode::upsample3d) {
    WanFeatCache::Slot& slot = cache.next();
    if (slot.state == State::empty) {
      slot.state = State::rep;  // first chunk: no time upsampling
    } else {
      Tensor keep = last_frames(x, WanFeatCache::kCacheT);
      if (keep.size(0) < WanFeatCache::kCacheT)
        keep = ops::concat({slot.state == State::frames ? last_frames(slot.frames, 1)
                                                        : Tensor::zeros(keep.shape(), keep.dtype(), keep.device()),
                            keep},
                           0);
      const int64_t T = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
      Tensor y = slot.state == State::rep ? (*time_conv)(x) : (*time_conv)(x, slot.frames);  // [T, 2C, H, W]
      slot.frames = std::move(keep);
      slot.state = State::frames;
      x = y.view({T * 2, C, H, W});  // frame 2t + j = channels [j*C, (j+1)*C) of frame t
    }
  }
  switch (mode) {
    case WanResampleMode::upsample2d:
    case WanResampleMode::upsample3d: {
      Tensor up = ops::upsample_nearest2x(x);  // [T, C, 2H, 2W] ("nearest-exact" x2 == nearest)
      x = resample->conv(up);                  // [T, out, 2H, 2W]
      break;
    }
    case WanResampleMode::downsample2d:
    case WanResampleMode::downsample3d:
      x = resample->conv(x);  // pad right/bottom by 1, 3x3 stride 2: [T, C, H/2, W/2]
      break;
    case WanResampleMode::none: break;
  }
  if (mode == WanResampleMode::downsample3d) {
    WanFeatCache::Slot& slot = cache.next();
    if (slot.state == State::empty) {
      slot.frames = x.contiguous().clone();  // first chunk: all its frames, no time downsampling
      slot.state = State::frames;
    } else {
      Tensor keep = last_frames(x, 1);
      x = (*time_conv)(ops::concat({last_frames(slot.frames, 1), x}, 0));  // [(T+1-3)/2+1, C, H, W]
      slot.frames = std::move(keep);
    }
  }
  return x;
}

// ---- AvgDown3D / DupUp3D ----------------------------------------------------------------------------

Tensor WanAvgDown3D::operator()(const Tensor& x_in) const {  // x [T, Cin, H, W]
  const int64_t factor = factor_t * factor_s * factor_s, group = in_channels * factor / out_channels;
  Tensor x = x_in;
  const int64_t pad_t = (factor_t - x.size(0) % factor_t) % factor_t;
  if (pad_t > 0)
    x = ops::concat({Tensor::zeros({pad_t, x.size(1), x.size(2), x.size(3)}, x.dtype(), x.device()), x}, 0);
  else if (!x.is_contiguous())
    x = x.contiguous();
  const int64_t T = x.size(0) / factor_t, C = in_channels, H = x.size(2) / factor_s, W = x.size(3) / factor_s;
  Tensor v = x.view({T, factor_t, C, H, factor_s, W, factor_s})  // [T', ft, C, H', fs, W', fs]
                 .permute({0, 2, 1, 4, 6, 3, 5})                 // [T', C, ft, fs_h, fs_w, H', W']
                 .contiguous()
                 .view({T, out_channels, group, H, W});          // channel c*factor + ... grouped
  return ops::mean(v, {2});                                      // [T', Cout, H', W']
}

Tensor WanDupUp3D::operator()(const Tensor& x, bool first_chunk) const {  // x [T, Cin, H, W]
  const int64_t factor = factor_t * factor_s * factor_s, repeats = out_channels * factor / in_channels;
  const int64_t T = x.size(0), H = x.size(2), W = x.size(3);
  Tensor y = ops::repeat_interleave(x, repeats, 1)                              // [T, Cout*factor, H, W]
                 .view({T, out_channels, factor_t, factor_s, factor_s, H, W})  // [T, Co, ft, fs_h, fs_w, H, W]
                 .permute({0, 2, 1, 5, 3, 6, 4})                               // [T, ft, Co, H, fs_h, W, fs_w]
                 .contiguous()
                 .view({T * factor_t, out_channels, H * factor_s, W * factor_s});
  if (first_chunk) y = y.slice(0, factor_t - 1, T * factor_t).contiguous();
  return y;
}

// ---- WanMidBlock ------------------------------------------------------------------------------------

WanMidBlock::WanMidBlock(int64_t dim) : Module("WanMidBlock") {
  resnets.push_back(std::make_unique<WanResidualBlock>(dim, dim));
  attentions.push_back(std::make_unique<WanAttentionBlock>(dim));
  resnets.push_back(std::make_unique<WanResidualBlock>(dim, dim));
  register_module("attentions", attentions);
  register_module("resnets", resnets);
}

Tensor WanMidBlock::forward(const Tensor& x, WanFeatCache& cache) {  // x [T, C, H, W]
  Tensor h = resnets[0](x, cache);
  for (size_t i = 0; i < attentions.size(); ++i) {
    h = attentions[i](h, cache);
    h = resnets[i + 1](h, cache);
  }
  return h;
}

// ---- Wan2.2 residual down block ---------------------------------------------------------------------

WanResidualDownBlock::WanResidualDownBlock(int64_t in_dim, int64_t out_dim, int64_t num_res_blocks,
                                           bool temperal_downsample, bool down_flag)
    : WanBlock("WanResidualDownBlock"),
      avg_shortcut{in_dim, out_dim, temperal_downsample ? 2 : 1, down_flag ? 2 : 1} {
  check(in_dim * avg_shortcut.factor_t * avg_shortcut.factor_s * avg_shortcut.factor_s % out_dim == 0,
        "WanResidualDownBlock", "AvgDown3D: ", in_dim, " channels do not group into ", out_dim);
  for (int64_t i = 0; i < num_res_blocks; ++i)
    resnets.push_back(std::make_unique<WanResidualBlock>(i == 0 ? in_dim : out_dim, out_dim));
  register_module("resnets", resnets);
  if (down_flag) {
    downsampler = std::make_unique<WanResample>(
        out_dim, temperal_downsample ? WanResampleMode::downsample3d : WanResampleMode::downsample2d);
    register_module("downsampler", *downsampler);
  }
}

Tensor WanResidualDownBlock::forward(const Tensor& x, WanFeatCache& cache, bool) {  // x [T, Cin, H, W]
  Tensor h = x;
  for (auto& r : resnets) h = (*r)(h, cache);        // [T, Cout, H, W]
  if (downsampler) h = (*downsampler)(h, cache);     // [T', Cout, H/2, W/2]
  return ops::add(h, avg_shortcut(x));
}

// ---- decoder up blocks ------------------------------------------------------------------------------

WanUpBlock::WanUpBlock(int64_t in_dim, int64_t out_dim, int64_t num_res_blocks, WanResampleMode mode)
    : WanBlock("WanUpBlock") {
  for (int64_t i = 0; i <= num_res_blocks; ++i)
    resnets.push_back(std::make_unique<WanResidualBlock>(i == 0 ? in_dim : out_dim, out_dim));
  register_module("resnets", resnets);
  if (mode != WanResampleMode::none) {
    upsamplers.push_back(std::make_unique<WanResample>(out_dim, mode));
    register_module("upsamplers", upsamplers);
  }
}

Tensor WanUpBlock::forward(const Tensor& x, WanFeatCache& cache, bool) {  // x [T, Cin, H, W]
  Tensor h = x;
  for (auto& r : resnets) h = (*r)(h, cache);     // [T, Cout, H, W]
  for (auto& u : upsamplers) h = (*u)(h, cache);  // [T or 2T, Cout/2, 2H, 2W]
  return h;
}

WanResidualUpBlock::WanResidualUpBlock(int64_t in_dim, int64_t out_dim, int64_t num_res_blocks,
                                       bool temperal_upsample, bool up_flag)
    : WanBlock("WanResidualUpBlock") {
  if (up_flag) {
    avg_shortcut = std::make_unique<WanDupUp3D>(WanDupUp3D{in_dim, out_dim, temperal_upsample ? 2 : 1, 2});
    check(out_dim * avg_shortcut->factor_t * 4 % in_dim == 0, "WanResidualUpBlock", "DupUp3D: ", out_dim,
          " channels are no multiple of ", in_dim);
  }
  for (int64_t i = 0; i <= num_res_blocks; ++i)
    resnets.push_back(std::make_unique<WanResidualBlock>(i == 0 ? in_dim : out_dim, out_dim));
  register_module("resnets", resnets);
  if (up_flag) {
    upsampler = std::make_unique<WanResample>(
        out_dim, temperal_upsample ? WanResampleMode::upsample3d : WanResampleMode::upsample2d, out_dim);
    register_module("upsampler", *upsampler);
  }
}

Tensor WanResidualUpBlock::forward(const Tensor& x, WanFeatCache& cache, bool first_chunk) {  // x [T, Cin, H, W]
  Tensor h = x;
  for (auto& r : resnets) h = (*r)(h, cache);   // [T, Cout, H, W]
  if (upsampler) h = (*upsampler)(h, cache);    // [T or 2T, Cout, 2H, 2W]
  if (avg_shortcut) h = ops::add(h, (*avg_shortcut)(x, first_chunk));
  return h;
}

}  // namespace diffq::vae
