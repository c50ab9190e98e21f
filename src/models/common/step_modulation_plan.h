// The modulation of a denoising loop's steps, computed for several steps at once. An adaLN model (FLUX's
// AdaLayerNormZero / Continuous) turns each step's time embedding temb [B, D] into modulation vectors with
// one linear per norm, linear(silu(temb)) [B, n * D]: at B = 1 a GEMV that reads the whole weight (3072 x
// 18432 bf16, 113 MB, per double block of FLUX.1) for one row, at the memory's speed. temb depends only on the
// step's timestep and the call's fixed conditioning (guidance, pooled prompt embedding), all known before the
// loop: so the plan, told the steps' timesteps, embeds a window of steps at a step's first call and each norm
// runs its linear once over the window's rows ([W * B, D]), reading its weight once for W steps.
//
// The same values: each step's temb is computed by the call's own embedding on that step's timestep alone (the
// same ops as an unplanned call), silu works per element, and the linear computes each row as it computes a
// B-row input where its kernel's rows do not depend on their count (the CPU's packed bf16 / int8 linears up to
// kWindowRows rows: tests/models/test_flux_step_plan.cpp holds a planned generation to the unplanned one's bits).
//
// Rows are found by identity: the temb a call gets from the plan is a view of the window's stacked embedding,
// and a norm asked for the modulation of such a view gets the matching rows of its window output; any other
// temb (an unplanned call, a compile trace's symbolic tensor, a call whose conditioning was not seen before
// the window was made) is computed as before. The owner clears the plan at the end of a generation.
#pragma once

#include <functional>
#include <map>
#include <mutex>
#include <vector>

#include "diffq/tensor.h"

namespace diffq::models {

class StepModulationPlan {
 public:
  // Rows a window holds at most (W = max(1, kWindowRows / B) steps).
  static constexpr int64_t kWindowRows = 32;

  // The coming generation's steps: the timestep tensor [B] each call will pass, in order.
  void plan(std::vector<Tensor> timesteps);
  // Forgets the steps and every table (the end of a generation).
  void clear();
  bool active() const;

  // The planned temb [B, D] for a call with `timestep` and conditioning `cond` (the values that with the
  // timestep determine temb: guidance, pooled embedding), as a view of its window's stack: embed(t_j) for
  // each step j of the window (called at the window's first call, in order), concatenated. Undefined when
  // the timestep is not a planned step's (by value) or symbolic.
  Tensor temb(const Tensor& timestep, const std::vector<float>& cond,
              const std::function<Tensor(const Tensor& timestep)>& embed);

  // The rows of `owner`'s modulation for a temb handed out by temb(): compute(window's stacked temb)
  // [W * B, n * D] is computed once per window and owner, and its rows of temb's step returned ([B, n * D]).
  // Undefined for any other temb.
  Tensor rows(const void* owner, const Tensor& temb, const std::function<Tensor(const Tensor& stacked)>& compute);

 private:
  struct Window {
    std::vector<float> cond;  // the conditioning it was made for
    int64_t first = 0;        // its first step
    Tensor stacked;           // [W * B, D]
    std::map<const void*, Tensor> outputs;
  };
  int64_t step_of(const Tensor& timestep) const;
  std::mutex mu_;
  std::vector<Tensor> steps_;
  std::vector<std::vector<float>> step_values_;
  std::vector<Window> windows_;  // one per conditioning seen (CFG's two)
};

}  // namespace diffq::models
