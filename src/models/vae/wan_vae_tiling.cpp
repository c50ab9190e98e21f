#include "models/vae/wan_vae_tiling.h"

#include <algorithm>

#include "diffq/error.h"
#include "ops/ops.h"

namespace diffq::vae {

WanTileBlender::WanTileBlender(int64_t bh, int64_t bw, int64_t sh, int64_t sw)
    : blend_h_(bh), blend_w_(bw), stride_h_(sh), stride_w_(sw) {
  check(sh > 0 && sw > 0, "vae.tiling", "tile strides must be positive, got ", sh, " x ", sw);
}

void WanTileBlender::blend(const Tensor& a, const Tensor& b, int64_t dim, int64_t extent) {
  const int64_t e = std::min({a.size(dim), b.size(dim), extent});
  if (e <= 0) return;
  // The weights of row (column) y: 1 - y/e for a, y/e for b, computed in double and used as float scalars.
  std::vector<float> wa(static_cast<size_t>(e)), wb(static_cast<size_t>(e));
  for (int64_t y = 0; y < e; ++y) {
    wa[size_t(y)] = float(1.0 - double(y) / double(e));
    wb[size_t(y)] = float(double(y) / double(e));
  }
  const Shape ws = dim == 2 ? Shape{e, 1} : Shape{e};  // broadcast over [F, C, e, W] or [F, C, H, e]
  Tensor ta = Tensor::from_vector(wa, ws), tb = Tensor::from_vector(wb, ws);
  if (!b.device().is_cpu()) ta = ops::to_device(ta, b.device()), tb = ops::to_device(tb, b.device());
  const Tensor a_part = a.slice(dim, a.size(dim) - e, a.size(dim));  // a[..., -e:, ...]
  const Tensor b_part = b.slice(dim, 0, e);                          // b[..., :e, ...]
  ops::copy_into(ops::add(ops::mul(a_part, ta), ops::mul(b_part, tb)), b_part);
}

Tensor WanTileBlender::add(int64_t i, int64_t j, Tensor& tile) {  // tile [F, C, th, tw]
  check(tile.dim() == 4 && tile.is_contiguous(), "vae.tiling", "expected a contiguous tile [F, C, H, W], got ",
        tile.str());
  if (i != row_) {  // a new row: the finished one becomes "above"
    check(i == row_ + 1 && j == 0, "vae.tiling", "tiles must come row-major, got (", i, ", ", j, ")");
    above_ = std::move(below_);
    below_.clear();
    left_ = Tensor();
    row_ = i;
  }
  check(j == int64_t(below_.size()), "vae.tiling", "tile (", i, ", ", j, ") out of order");
  const int64_t th = tile.size(2), tw = tile.size(3);
  if (i > 0) blend(above_.at(size_t(j)), tile, 2, blend_h_);  // blend_v(rows[i-1][j], tile)
  if (j > 0) blend(left_, tile, 3, blend_w_);                 // blend_h(row[j-1], tile)
  // What later tiles read of this one, now final: copies, so that the tile itself can go.
  const int64_t kh = std::min(th, std::max<int64_t>(blend_h_, 0)), kw = std::min(tw, std::max<int64_t>(blend_w_, 0));
  below_.push_back(kh > 0 ? ops::copy(tile.slice(2, th - kh, th)) : Tensor());
  left_ = kw > 0 ? ops::copy(tile.slice(3, tw - kw, tw)) : Tensor();
  return tile.slice(2, 0, std::min(th, stride_h_)).slice(3, 0, std::min(tw, stride_w_));
}

}  // namespace diffq::vae
