// The shared part of every step cache: per-context state (Diffusers' StateManager keyed by the
// cache_context name, "cond" / "uncond"), the streams a block loop carries, and the per-run report.
//
// A transformer that supports caching runs its block loop through StepCache::run_blocks, handing it a
// callback that runs blocks [begin, end) on the streams; the cache decides which ranges run. The cache
// sits at the block-loop level, so regionally compiled blocks stay compiled (a block either runs, compiled,
// or does not run at all). TaylorSeer instead replaces attention outputs inside the blocks
// (attention_hook); see taylorseer_cache.h.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "diffq/cache.h"
#include "diffq/tensor.h"

namespace diffq::cache {

// What flows through the block loop: image/video tokens x [B, N, D] and (FLUX) text tokens e [B, T, D];
// e is undefined for Wan (its blocks return only hidden_states).
struct Streams {
  Tensor x, e;
};
using RunBlocks = std::function<Streams(int64_t begin, int64_t end, const Streams& in)>;
// TeaCache's input: the first block's modulated input (FLUX: transformer_blocks[0].norm1(x, temb)[0]).
using ModulatedInput = std::function<Tensor(const Tensor& x)>;

// Diffusers' StateManager: one state per context name, created on first use, dropped by reset().
template <class State>
class StateManager {
 public:
  State& get(const std::string& context) { return states_[context]; }
  void reset() { states_.clear(); }

 private:
  std::map<std::string, State> states_;
};

class StepCache {
 public:
  StepCache(CacheOptions opt, std::string model_name, int64_t num_blocks, std::string skipped_range,
            std::string always_run);
  virtual ~StepCache() = default;

  // Diffusers' _reset_stateful_cache (at the end of a pipeline call): every context starts afresh.
  // run_steps: the run's num_inference_steps (fills options' "0 = the run's").
  virtual void reset(int64_t run_steps);
  // Diffusers' cache_context(name): the following transformer calls use this context's state.
  void set_context(const std::string& name) { context_ = name; }
  const std::string& context() const { return context_; }

  // One transformer call's block loop.
  virtual Streams run_blocks(const Streams& in, const RunBlocks& run, const ModulatedInput& modulated) = 0;
  // TaylorSeer only: the attention modules' hook (see taylorseer_cache.h); others return nullptr.
  virtual std::function<std::vector<Tensor>(int64_t module, const std::function<std::vector<Tensor>()>&)>
  attention_hook() { return nullptr; }
  // Blocks must run eagerly (TaylorSeer: the attention outputs are replaced inside the block).
  virtual bool needs_eager_blocks() const { return false; }

  const CacheOptions& options() const { return opt_; }
  // Appends this cache's decisions since the last reset to `r`.
  virtual void append_report(CacheReport& r) const;

 protected:
  void record(bool computed);
  CacheOptions opt_;
  std::string model_name_;
  int64_t num_blocks_;
  std::string context_ = "cond";
  std::string skipped_range_, always_run_;
  std::vector<CacheReport::Step> steps_;
  std::map<std::string, int64_t> calls_;  // per context
  int64_t run_steps_ = 0;
};

// Builds the cache for a transformer with `num_blocks` blocks in loop order, named as Diffusers names them
// (block_names[i], e.g. "transformer_blocks.0", "single_transformer_blocks.1", "blocks.3").
std::unique_ptr<StepCache> make_step_cache(const CacheOptions& opt, const std::string& model_name,
                                           const std::vector<std::string>& block_names, bool is_flux);

// Scalars the decision rules read, computed on the host in double and rounded to the tensor's dtype as
// torch's .mean() result would be (fp32 / bf16): mean(|a|) and mean(|a - b|) (a - b in a's dtype).
double abs_mean(const Tensor& a);
double abs_diff_mean(const Tensor& a, const Tensor& b);
double round_to(double v, DType dt);  // a scalar as a tensor of dtype dt holds it

}  // namespace diffq::cache
