#include "cache/teacache.h"

#include "diffq/error.h"
#include "ops/ops.h"

namespace diffq::cache {

double teacache_flux_rescale(double x) {
  static const double c[] = {4.98651651e+02, -2.83781631e+02, 5.58554382e+01, -3.82021401e+00, 2.64230861e-01};
  double y = 0;
  for (double k : c) y = y * x + k;  // Horner, as np.poly1d evaluates
  return y;
}

void TeaCache::reset(int64_t run_steps) {
  StepCache::reset(run_steps);
  states_.reset();
}

Streams TeaCache::run_blocks(const Streams& in, const RunBlocks& run, const ModulatedInput& modulated) {
  check(bool(modulated), "cache", "TeaCache needs the model's first-block modulated input");
  State& s = states_.get(context_);
  const Tensor inp = modulated(in.x);  // [B, N, D]
  bool compute = true;
  if (s.cnt == 0 || s.cnt == run_steps_ - 1) {
    s.accumulated_rel_l1_distance = 0;
  } else {
    // .cpu().item() of a tensor division in the input's dtype, then the polynomial in double.
    const double rel = round_to(abs_diff_mean(inp, s.previous_modulated_input) / abs_mean(s.previous_modulated_input),
                                inp.dtype());
    s.accumulated_rel_l1_distance += teacache_flux_rescale(rel);
    if (s.accumulated_rel_l1_distance < opt_.effective_threshold()) compute = false;
    else s.accumulated_rel_l1_distance = 0;
  }
  s.previous_modulated_input = inp;
  s.cnt += 1;
  if (s.cnt == run_steps_) s.cnt = 0;
  if (!compute && !s.previous_residual.defined()) compute = true;
  record(compute);
  if (!compute) return {ops::add(in.x, s.previous_residual), in.e};
  const Streams out = run(0, num_blocks_, in);
  s.previous_residual = ops::sub(out.x, in.x);
  return out;
}

}  // namespace diffq::cache
