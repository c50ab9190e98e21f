// FLUX's structure at a small width (4 heads x 64: the head dim and the RoPE axes' proportions of FLUX.1's),
// one block of each kind, guidance embedding: the model the FLUX transformer's path tests build with random
// weights (init_parameters_randn).
#pragma once

#include "models/flux/flux_transformer.h"

namespace diffq::testing {

inline models::flux::FluxTransformerConfig small_flux_config() {
  models::flux::FluxTransformerConfig c;
  c.num_layers = 1;
  c.num_single_layers = 1;
  c.num_attention_heads = 4;
  c.attention_head_dim = 64;
  c.axes_dims_rope = {8, 28, 28};
  c.in_channels = c.out_channels = 16;
  c.joint_attention_dim = 64;
  c.pooled_projection_dim = 32;
  c.guidance_embeds = true;
  return c;
}

}  // namespace diffq::testing
