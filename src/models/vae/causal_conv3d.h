// Wan's causal 3D convolution (diffusers autoencoder_kl_wan.py WanCausalConv3d) and the feature cache
// that lets the VAE run a video a chunk of frames at a time (feat_cache / feat_idx, CACHE_T = 2).
//
// Layout: inside the Wan VAE a video of one sample is a frames-major tensor [T, C, H, W] (Diffusers'
// [B, C, T, H, W] of one sample, permuted), so that every per-frame op (conv2d, norms, attention,
// resampling) sees a plain batch of frames, and the frames of a causal window lie next to each other.
#pragma once

#include <array>
#include <vector>

#include "modules/module.h"

namespace diffq::vae {

// Diffusers' feat_cache list with its running feat_idx: each cached op takes the next slot in call
// order (the order is fixed, so slot i always belongs to the same op). A slot is empty (None), "Rep"
// (an upsample3d that has seen its first chunk) or holds the last (up to CACHE_T) input frames.
class WanFeatCache {
 public:
  static constexpr int64_t kCacheT = 2;  // CACHE_T
  enum class State { empty, rep, frames };
  struct Slot {
    State state = State::empty;
    Tensor frames;  // [t <= kCacheT, C, H, W] when state == frames
  };
  void clear() { slots_.clear(), idx_ = 0; }  // clear_cache()
  void start_chunk() { idx_ = 0; }             // feat_idx = [0]
  Slot& next();                                // feat_cache[feat_idx]; feat_idx += 1

 private:
  std::vector<Slot> slots_;
  size_t idx_ = 0;
};

// nn.Conv3d with causal time padding: 2 * padding_t zero frames in front, none behind; the frames of
// `cache` (the previous chunk's last ones) replace as many of those zero frames. Spatial padding is
// symmetric. weight [O, C, kt, kh, kw] as in the checkpoint.
//
// Computed as one conv2d over all output frames: output frame t reads the kt consecutive input frames
// from t * stride_t on, which in the frames-major layout are one contiguous [kt * C, H, W] block, so
// the input is viewed (no copy) as [T_out, kt * C, H, W] and convolved with the weight laid out as
// [O, kt * C, kh, kw] (one GEMM with K = kt * C * kh * kw). prepare() stores the weight in that layout
// (as a permuted view of shape [O, C, kt, kh, kw], so the parameter keeps its checkpoint shape).
class WanCausalConv3d : public Module {
 public:
  WanCausalConv3d(int64_t in_channels, int64_t out_channels, std::array<int64_t, 3> kernel,
                  std::array<int64_t, 3> stride = {1, 1, 1}, std::array<int64_t, 3> padding = {0, 0, 0});
  WanCausalConv3d(int64_t in_channels, int64_t out_channels, int64_t kernel, int64_t padding = 0)
      : WanCausalConv3d(in_channels, out_channels, {kernel, kernel, kernel}, {1, 1, 1},
                        {padding, padding, padding}) {}
  Tensor operator()(const Tensor& x, const Tensor& cache = {}, const Tensor& residual = {}) {
    return call([&] { return forward(x, cache, residual); });
  }
  // x [T, C, H, W], cache [t, C, H, W] or undefined -> [T_out, O, H_out, W_out]; with a residual (that
  // shape, x's dtype): residual + the conv in one op (ops::conv2d_add: the two ops' values).
  Tensor forward(const Tensor& x, const Tensor& cache = {}, const Tensor& residual = {});
  // Re-lays the loaded weight out as [O, kt, C, kh, kw] in memory (see above). Idempotent.
  void prepare();

  int64_t in_channels, out_channels;
  std::array<int64_t, 3> kernel, stride, padding;
  Parameter weight;  // [O, C, kt, kh, kw]
  Parameter bias;    // [O]
};

// The cached call every Wan block makes around a causal conv: remember the last CACHE_T frames of x
// (topped up with the previous cache's last frame when x has only one), run the conv with the previous
// cache in front, store the new cache.
// With a residual: residual + the conv (one op, except while compile captures: then the two ops).
Tensor cached_conv(WanCausalConv3d& conv, const Tensor& x, WanFeatCache& cache, const Tensor& residual = {});

// The last n frames of x [T, ...] as a fresh contiguous tensor (Diffusers' x[:, :, -n:].clone()).
Tensor last_frames(const Tensor& x, int64_t n);

}  // namespace diffq::vae
