// TaylorSeer (Diffusers 0.42.1 hooks/taylorseer_cache.py; arXiv 2503.06923), default identifiers:
// every module whose name fullmatches ^transformer_blocks.*attn / ^single_transformer_blocks.*attn /
// ^blocks.*attn — FLUX's `attn` of each block (dual: outputs (image, text); single: one output). The rest
// of each block always runs. Per module and context (TaylorSeerCacheHook._measure_should_compute):
//     current_step += 1
//     should_compute = current_step < disable_cache_before_step
//                   or (current_step - disable_cache_before_step - 1) % cache_interval == 0   (Python %)
//                   or (disable_cache_after_step set and current_step >= disable_cache_after_step)
// Computed (TaylorSeerState.update): factors[0] = out; factors[j+1] = (factors[j] - prev[j]) / delta_step
// for j < max_order while prev[j] exists (prev cast back to out's dtype); all stored in
// taylor_factors_dtype (bfloat16 by default). Predicted (TaylorSeerState.predict):
//     out = sum_k factors[k] * (step_offset^k / k!),  step_offset = current_step - last_update_step.
// The attention outputs are replaced inside the blocks, so with TaylorSeer the blocks run eagerly (a
// compiled block graph cannot take a predicted attention output).
#pragma once

#include "cache/step_cache.h"

namespace diffq::cache {

class TaylorSeerCache final : public StepCache {
 public:
  TaylorSeerCache(const CacheOptions& opt, const std::string& model_name, int64_t num_blocks,
                  const std::vector<std::string>& block_names);
  void reset(int64_t run_steps) override;
  Streams run_blocks(const Streams& in, const RunBlocks& run, const ModulatedInput& modulated) override;
  std::function<std::vector<Tensor>(int64_t, const std::function<std::vector<Tensor>()>&)> attention_hook() override;
  bool needs_eager_blocks() const override { return true; }

  // The decision rule alone (scalar; also what the tests call).
  static bool should_compute(int64_t current_step, const CacheOptions& o);

 private:
  struct State {  // TaylorSeerState
    int64_t current_step = -1;
    bool updated = false;
    int64_t last_update_step = 0;
    std::vector<DType> module_dtypes;
    std::vector<std::vector<Tensor>> taylor_factors;  // [output][order]
  };
  std::vector<Tensor> run_module(int64_t module, const std::function<std::vector<Tensor>()>& compute);
  std::map<int64_t, StateManager<State>> states_;  // per hooked module
  std::map<std::string, int64_t> steps_seen_;      // per context, for the report
};

}  // namespace diffq::cache
