// FirstBlockCache (Diffusers 0.42.1 hooks/first_block_cache.py; ParaAttention's "first block cache").
//
// Every call runs the head block (the first of transformer_blocks + single_transformer_blocks, or of
// Wan's blocks). Its residual r = head_out.x - head_in.x is compared with the residual of the last call
// that ran every block (FBCSharedBlockState.head_block_residual):
//     diff = mean(|r - r_prev|) / mean(|r_prev|)      (FBCHeadBlockHook._should_compute_remaining_blocks)
//     should_compute = r_prev is None or diff > threshold
// Computed: the remaining blocks run, and tail_block_residuals = (tail_out.x - head_out.x,
// tail_out.e - head_out.e) are kept with head_block_residual = r. Skipped: x = head_out.x + tail_res.x,
// e = head_out.e + tail_res.e (both streams, as Diffusers caches encoder_hidden_states too); the
// previous residual is NOT replaced, so the comparison stays against the last computed call.
#pragma once

#include "cache/step_cache.h"

namespace diffq::cache {

class FirstBlockCache final : public StepCache {
 public:
  using StepCache::StepCache;
  void reset(int64_t run_steps) override;
  Streams run_blocks(const Streams& in, const RunBlocks& run, const ModulatedInput& modulated) override;

  // The decision rule alone (scalar; also what the tests call): r_prev_absent or diff > threshold.
  static bool should_compute(double absmean_diff, double prev_absmean, double threshold, DType dt);

 private:
  struct State {  // FBCSharedBlockState
    Tensor head_block_residual;
    Streams head_block_output;
    Streams tail_block_residuals;
    bool has_tail = false;
  };
  StateManager<State> states_;
};

}  // namespace diffq::cache
