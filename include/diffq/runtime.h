// Process-wide runtime settings.
#pragma once

namespace diffq {

// CPU threads used by diffq's kernels and its BLAS: set_num_threads(n) (n <= 0 restores the default:
// DIFFQ_NUM_THREADS, else the number of hardware threads).
int num_threads();
void set_num_threads(int n);

}  // namespace diffq
