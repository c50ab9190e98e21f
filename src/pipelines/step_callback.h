// The per-step callback every pipeline takes: (step index, total steps, scheduler timestep); returning
// false interrupts the loop (Diffusers' `interrupt`: the remaining steps are skipped, the output is still
// produced from the latents so far).
#pragma once

#include <cstdint>
#include <functional>

namespace diffq {

using StepCallback = std::function<bool(int64_t step, int64_t total, float timestep)>;

}  // namespace diffq
