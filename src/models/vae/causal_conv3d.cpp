#include "models/vae/causal_conv3d.h"

#include "diffq/error.h"
#include "ops/ops.h"

namespace diffq::vae {

WanFeatCache::Slot& WanFeatCache::next() {
  if (idx_ >= slots_.size()) slots_.resize(idx_ + 1);
  return slots_[idx_++];
}

Tensor last_frames(const Tensor& x, int64_t n) {
  const int64_t T = x.size(0);
  return x.slice(0, std::max<int64_t>(0, T - n), T).clone();  // a copy: a view would keep all of x alive
}

WanCausalConv3d::WanCausalConv3d(int64_t in, int64_t out, std::array<int64_t, 3> k, std::array<int64_t, 3> s,
                                 std::array<int64_t, 3> p)
    : Module("WanCausalConv3d"),
      in_channels(in),
      out_channels(out),
      kernel(k),
      stride(s),
      padding(p),
      weight({out, in, k[0], k[1], k[2]}),
      bias({out}) {
  check(s[1] == s[2] && p[1] == p[2], "WanCausalConv3d", "spatial stride and padding must be square");
  register_parameter("weight", weight);
  register_parameter("bias", bias);
}

void WanCausalConv3d::prepare() {
  if (!weight.defined() || weight.is_quantized() || kernel[0] == 1) return;
  const Tensor& w = weight.dense();                      // [O, C, kt, kh, kw]
  if (w.permute({0, 2, 1, 3, 4}).is_contiguous()) return;  // already [O, kt, C, kh, kw] in memory
  Tensor relaid = w.permute({0, 2, 1, 3, 4}).contiguous();  // [O, kt, C, kh, kw]
  weight.set(relaid.permute({0, 2, 1, 3, 4}), Residency::host);  // viewed as [O, C, kt, kh, kw]
}

Tensor WanCausalConv3d::forward(const Tensor& x, const Tensor& cache, const Tensor& residual) {  // x [T, C, H, W]
  check(x.dim() == 4 && x.size(1) == in_channels, "WanCausalConv3d", "expected frames [T, ", in_channels,
        ", H, W], got ", shape_str(x.shape()));
  const int64_t kt = kernel[0], C = in_channels, O = out_channels;
  int64_t front = 2 * padding[0];  // causal: zero frames in front only
  std::vector<Tensor> parts;
  if (cache.defined() && front > 0) {
    front -= cache.size(0);
    check(front >= 0, "WanCausalConv3d", "cache of ", cache.size(0), " frames exceeds the causal padding");
  }
  if (front > 0) parts.push_back(Tensor::zeros({front, C, x.size(2), x.size(3)}, x.dtype(), x.device()));
  if (cache.defined() && 2 * padding[0] > 0) parts.push_back(cache);
  Tensor xin = x;
  if (!parts.empty()) {
    parts.push_back(x);
    xin = ops::concat(parts, 0);  // [Tp, C, H, W]
  } else if (!xin.is_contiguous()) {
    xin = xin.contiguous();
  }
  const int64_t Tp = xin.size(0), H = xin.size(2), W = xin.size(3);
  check(Tp >= kt, "WanCausalConv3d", Tp, " frames (padded) for a temporal kernel of ", kt);
  const int64_t To = (Tp - kt) / stride[0] + 1;
  const Tensor& w = weight.dense();  // [O, C, kt, kh, kw]
  Tensor w2 = w.permute({0, 2, 1, 3, 4});  // [O, kt, C, kh, kw]
  if (!w2.is_contiguous()) w2 = w2.contiguous();
  w2 = w2.view({O, kt * C, kernel[1], kernel[2]});  // [O, kt*C, kh, kw]
  // Output frame t reads input frames [t*s, t*s + kt): rows of kt*C consecutive channel planes.
  const int64_t plane = C * H * W;
  const Tensor windows(xin.storage(), {To, kt * C, H, W}, {stride[0] * plane, H * W, W, 1}, xin.offset(),
                       xin.dtype());  // [To, kt*C, H, W] (overlapping view)
  const int64_t p = padding[1];
  if (residual.defined())  // residual + conv: [To, O, Ho, Wo]
    return ops::conv2d_add(windows, w2, bias.dense(), stride[1], {p, p, p, p}, residual);
  return ops::conv2d(windows, w2, bias.dense(), stride[1], {p, p, p, p});  // [To, O, Ho, Wo]
}

Tensor cached_conv(WanCausalConv3d& conv, const Tensor& x, WanFeatCache& cache, const Tensor& residual) {  // x [T, C, H, W]
  WanFeatCache::Slot& slot = cache.next();
  Tensor keep = last_frames(x, WanFeatCache::kCacheT);  // [<=2, C, H, W]
  const bool had = slot.state == WanFeatCache::State::frames;
  if (keep.size(0) < WanFeatCache::kCacheT && had)
    keep = ops::concat({last_frames(slot.frames, 1), keep}, 0);  // last frame of the previous chunk first
  const bool fuse = residual.defined() && !CaptureHook::current();  // a capture records the module call alone
  Tensor out = conv(x, had ? slot.frames : Tensor(), fuse ? residual : Tensor());
  if (residual.defined() && !fuse) out = ops::add(residual, out);
  slot.frames = std::move(keep);
  slot.state = WanFeatCache::State::frames;
  return out;
}

}  // namespace diffq::vae
