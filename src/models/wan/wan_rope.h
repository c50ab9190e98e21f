// WanRotaryPosEmbed (Diffusers 0.42.1, transformer_wan.py): 3-axis rotary embedding over the
// (frame, row, column) grid of patches. The head dimension is split as Diffusers does:
// h = w = 2 * (head_dim / 6), t = head_dim - h - w (128 -> 44, 42, 42). Per axis the tables are
// get_1d_rotary_pos_embed(dim, rope_max_seq_len, theta 10000, use_real, repeat_interleave_real) with
// float64 frequencies and angles, cast to float32.
#pragma once

#include <cstdint>
#include <utility>

#include "diffq/tensor.h"

namespace diffq::models::wan {

struct WanRopeAxes {
  int64_t t, h, w;  // head dims given to the frame, row and column axes (each even, sum = head_dim)
};
WanRopeAxes wan_rope_axes(int64_t attention_head_dim);

// {cos, sin}, each [ppf * pph * ppw, head_dim] float32, tokens in (f, h, w) order, every value
// repeated for its pair (c0, c0, c1, c1, ...) as ops::rope expects. Positions must be < max_seq_len
// (the size of Diffusers' precomputed tables); larger grids are an error.
std::pair<Tensor, Tensor> wan_rope_tables(int64_t attention_head_dim, int64_t ppf, int64_t pph, int64_t ppw,
                                          int64_t max_seq_len, double theta = 10000.0);

}  // namespace diffq::models::wan
