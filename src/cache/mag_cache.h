// MagCache (Diffusers 0.42.1 hooks/mag_cache.py; github.com/Zehong-Ma/MagCache).
//
// The decision is made before the head block from the step index alone (MagCacheHeadHook.new_forward),
// with float32 arithmetic as Diffusers' 0-d float32 tensors do it:
//     scale = mag_ratios[step] (1.0 past the end)
//     retention_step = int(retention_ratio * num_inference_steps + 0.5)
//     if step >= retention_step:
//         accumulated_ratio *= scale; accumulated_steps += 1; accumulated_err += |1 - accumulated_ratio|
//         skip if previous_residual exists and accumulated_err <= threshold and accumulated_steps <= max_skip_steps
//         else (compute) accumulated_ratio = 1, accumulated_steps = 0, accumulated_err = 0
// Skipped: x = head_in.x + previous_residual, e passes through unchanged. Computed: every block runs and
// previous_residual = tail_out.x - head_in.x. The step index wraps to 0 (state reset) after
// num_inference_steps calls (MagCacheBlockHook._advance_step). mag_ratios of another length are
// nearest-interpolated (nearest_interp: round(i * (L-1)/(N-1)) in float32, half to even).
// Calibration: nothing is skipped; per step ratio = mean_tokens(||r_t|| / (||r_{t-1}|| + 1e-8)) (1.0 first).
#pragma once

#include "cache/step_cache.h"

namespace diffq::cache {

// Diffusers' FLUX_MAG_RATIOS (28 values, FLUX.1-dev, 28 steps).
const std::vector<float>& flux_mag_ratios();
// nearest_interp(src, target_length)
std::vector<float> nearest_interp(const std::vector<float>& src, int64_t target_length);

class MagCache final : public StepCache {
 public:
  using StepCache::StepCache;
  void reset(int64_t run_steps) override;
  Streams run_blocks(const Streams& in, const RunBlocks& run, const ModulatedInput& modulated) override;
  void append_report(CacheReport& r) const override;

 private:
  struct State {  // MagCacheState
    Tensor previous_residual;
    float accumulated_ratio = 1.0f, accumulated_err = 0.0f;
    int64_t accumulated_steps = 0, step_index = 0;
    std::vector<double> calibration_ratios;
  };
  bool decide(State& s) const;
  void advance_step(State& s);
  StateManager<State> states_;
  std::vector<float> ratios_;
  int64_t num_inference_steps_ = 28;
  std::vector<double> calibration_;  // the last completed calibration of the "cond" context
};

}  // namespace diffq::cache
