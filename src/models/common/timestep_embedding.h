// Sinusoidal timestep embedding as Diffusers' get_timestep_embedding (embeddings.py), shared by the
// diffusion transformers (Flux, Wan, ...). Built from ops, so it traces.
#pragma once

#include "diffq/tensor.h"

namespace diffq::models {

struct TimestepSinusoid {
  int64_t dim = 256;
  bool flip_sin_to_cos = true;         // true: [cos, sin]; false: [sin, cos]
  double downscale_freq_shift = 0.0;   // freq_k = exp(-ln(max_period) k / (dim/2 - shift))
  double scale = 1.0;
  double max_period = 10000.0;
};

// t [B] (any float dtype; read as float32 like Diffusers' timesteps.float()) -> [B, dim] float32.
Tensor timestep_embedding(const Tensor& t, const TimestepSinusoid& cfg);

}  // namespace diffq::models
