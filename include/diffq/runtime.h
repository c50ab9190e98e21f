// Process-wide runtime settings.
#pragma once

namespace diffq {

// CPU threads used by diffq's kernels and its BLAS: set_num_threads(n) (n <= 0 restores the default:
// DIFFQ_NUM_THREADS, else the number of hardware threads).
int num_threads();
void set_num_threads(int n);

// The per-op profile (DIFFQ_PROFILE_OPS=1 or shapes; printed to stderr at exit) forgets what it has timed so
// far: the table then covers only the calls after this one (diffq bench calls it after its warm-up runs, so
// first-call costs such as primitive creation and weight packing stay out of it). No effect when disabled.
void reset_op_profile();

}  // namespace diffq
