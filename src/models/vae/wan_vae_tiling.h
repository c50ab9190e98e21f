// Spatial tiling of AutoencoderKLWan (Diffusers' enable_tiling: tiled_decode / tiled_encode). A video is
// cut into overlapping tiles, each tile is run through the whole decoder (or encoder) over all frames on
// its own, and neighbouring results are cross-faded over the overlap exactly as Diffusers' blend_v /
// blend_h do, then each tile's top-left [stride_h, stride_w] corner is kept.
//
// Diffusers blends in place, tile by tile in row-major order: tile (i, j) is blended with the tile above
// and then the tile to its left, both of which were blended themselves before. WanTileBlender streams
// the same computation: it keeps only the last rows of the previous tile row and the last columns of the
// previous tile, so a tile's piece can go straight into the output.
#pragma once

#include <vector>

#include "diffq/tensor.h"

namespace diffq::vae {

// One tile axis of Diffusers' loops: tile starts 0, stride, 2*stride, ... < size.
inline std::vector<int64_t> wan_tile_starts(int64_t size, int64_t stride) {
  std::vector<int64_t> s;
  for (int64_t i = 0; i < size; i += stride) s.push_back(i);
  return s;
}

class WanTileBlender {
 public:
  // blend_h / blend_w: blend extents (min tile - stride) along height / width; stride_h / stride_w: the
  // size of the piece kept of each tile. All in the tiles' own pixel units.
  WanTileBlender(int64_t blend_h, int64_t blend_w, int64_t stride_h, int64_t stride_w);

  // tile [F, C, th, tw] (contiguous; blended in place) at grid row i, column j, given row-major
  // (i = 0, 1, ...; j = 0, 1, ... within a row). Returns its piece [F, C, min(th, stride_h),
  // min(tw, stride_w)] (a view of the tile).
  Tensor add(int64_t i, int64_t j, Tensor& tile);

  // Diffusers' blend_v (dim 2) / blend_h (dim 3): b's first e rows (columns) become a's last e times
  // (1 - y/e) plus b's times y/e, e = min(a's, b's size, extent), in b's dtype (each product rounded,
  // as torch does). b is modified in place.
  static void blend(const Tensor& a, const Tensor& b, int64_t dim, int64_t extent);

 private:
  int64_t blend_h_, blend_w_, stride_h_, stride_w_;
  int64_t row_ = -1;
  std::vector<Tensor> above_;  // per column: the last blend_h rows of the previous row's tile (blended)
  std::vector<Tensor> below_;  // per column: the same of the current row, for the next one
  Tensor left_;                // the last blend_w columns of the previous tile of this row (blended)
};

}  // namespace diffq::vae
