// TeaCache for FLUX (TeaCache4FLUX, github.com/ali-vilab/TeaCache, TeaCache4FLUX/teacache_flux.py;
// Liu et al., "Timestep Embedding Tells: It's Time to Cache for Video Diffusion Model", CVPR 2025).
// Not in Diffusers; its published rule and coefficients:
//     inp = transformer_blocks[0].norm1(hidden_states, emb=temb)[0]       (the modulated input)
//     first (cnt == 0) and last (cnt == num_steps - 1) call: compute, accumulated = 0
//     else accumulated += poly(mean(|inp - inp_prev|) / mean(|inp_prev|)),
//          poly = np.poly1d([4.98651651e+02, -2.83781631e+02, 5.58554382e+01, -3.82021401e+00, 2.64230861e-01])
//          skip if accumulated < rel_l1_thresh else compute and accumulated = 0
//     inp_prev = inp (every call); cnt wraps after num_steps.
// Skipped: x += previous_residual (the text stream is not used after the blocks); computed:
// previous_residual = blocks(x) - x. Suggested thresholds: 0.25 (1.5x), 0.4 (1.8x), 0.6 (2.0x), 0.8 (2.25x).
#pragma once

#include "cache/step_cache.h"

namespace diffq::cache {

// np.poly1d of TeaCache4FLUX's coefficients (highest power first), in double.
double teacache_flux_rescale(double rel_l1);

class TeaCache final : public StepCache {
 public:
  using StepCache::StepCache;
  void reset(int64_t run_steps) override;
  Streams run_blocks(const Streams& in, const RunBlocks& run, const ModulatedInput& modulated) override;

 private:
  struct State {
    int64_t cnt = 0;
    double accumulated_rel_l1_distance = 0;
    Tensor previous_modulated_input, previous_residual;
  };
  StateManager<State> states_;
};

}  // namespace diffq::cache
