#include "models/common/timestep_embedding.h"

#include <cmath>
#include <vector>

#include "diffq/error.h"
#include "ops/ops.h"

namespace diffq::models {

Tensor timestep_embedding(const Tensor& t, const TimestepSinusoid& cfg) {
  check(t.dim() == 1, "timestep_embedding", "timesteps must be 1-D [B], got ", t.str());
  check(cfg.dim >= 2, "timestep_embedding", "dim must be >= 2, got ", cfg.dim);
  const int64_t half = cfg.dim / 2;
  // The frequencies as Diffusers computes them: every step in float32.
  const float neg_log_period = float(-std::log(cfg.max_period));
  const float denom = float(double(half) - cfg.downscale_freq_shift);
  std::vector<float> freqs(static_cast<size_t>(half));
  for (int64_t k = 0; k < half; ++k) freqs[size_t(k)] = std::exp(neg_log_period * float(k) / denom);
  const Tensor f = Tensor::from_vector(freqs, {1, half}).to(t.device());  // [1, half]

  Tensor args = ops::mul(t.to(DType::f32).unsqueeze(1), f);  // [B, half]
  if (cfg.scale != 1.0) args = ops::mul_scalar(args, cfg.scale);
  const Tensor s = ops::unary(args, ops::UnaryFn::sin), c = ops::unary(args, ops::UnaryFn::cos);  // [B, half]
  Tensor emb = cfg.flip_sin_to_cos ? ops::concat({c, s}, 1) : ops::concat({s, c}, 1);   // [B, 2*half]
  if (cfg.dim % 2 == 1) emb = ops::concat({emb, Tensor::zeros({t.size(0), 1}, DType::f32, t.device())}, 1);
  return emb;  // [B, dim]
}

}  // namespace diffq::models
