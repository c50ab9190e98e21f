#include "cache/first_block_cache.h"

#include "ops/ops.h"

namespace diffq::cache {

void FirstBlockCache::reset(int64_t run_steps) {
  StepCache::reset(run_steps);
  states_.reset();
}

bool FirstBlockCache::should_compute(double absmean_diff, double prev_absmean, double threshold, DType dt) {
  // diff = (absmean / prev_hidden_states_absmean).item(): a tensor division in the residual's dtype.
  const double diff = round_to(absmean_diff / prev_absmean, dt);
  return diff > threshold;
}

Streams FirstBlockCache::run_blocks(const Streams& in, const RunBlocks& run, const ModulatedInput&) {
  State& s = states_.get(context_);
  const Streams head = run(0, 1, in);                       // FBCHeadBlockHook: the head block always runs
  const Tensor residual = ops::sub(head.x, in.x);           // hidden_states_residual [B, N, D]
  bool compute = true;
  if (s.head_block_residual.defined()) {
    compute = should_compute(abs_diff_mean(residual, s.head_block_residual), abs_mean(s.head_block_residual),
                             opt_.effective_threshold(), residual.dtype());
  }
  // A skip needs the tail residuals of an earlier computed call; Diffusers has them whenever r_prev exists.
  if (!compute && !s.has_tail) compute = true;
  record(compute);
  if (!compute) {
    Streams out;
    out.x = ops::add(s.tail_block_residuals.x, head.x);  // tail_block_residuals[0] + output[hidden]
    if (head.e.defined()) out.e = ops::add(s.tail_block_residuals.e, head.e);
    return out;
  }
  s.head_block_output = head;
  s.head_block_residual = residual;
  const Streams tail = run(1, num_blocks_, head);  // FBCBlockHook(s); the last one is the tail
  s.tail_block_residuals.x = ops::sub(tail.x, head.x);
  if (tail.e.defined()) s.tail_block_residuals.e = ops::sub(tail.e, head.e);
  s.has_tail = true;
  return tail;
}

}  // namespace diffq::cache
