// The host's thread pool: every CPU kernel, quantizer and compiled CPU kernel splits its work over it
// (it is the host runtime, not a backend: quant and compile use it without naming the CPU backend).
// Thread count: set_num_threads(), else DIFFQ_NUM_THREADS, else the number of hardware threads.
// parallel_for splits [0, n) into contiguous chunks of at least `grain` items.
#pragma once

#include <cstdint>
#include <functional>

namespace diffq::core {

int num_threads();
void set_num_threads(int n);  // n <= 0: back to the default
// f(begin, end) is called on disjoint ranges covering [0, n); runs inline when n < 2*grain or one thread.
void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& f);
// True on a thread that is running a parallel_for body (a nested parallel_for runs inline there).
bool in_parallel_region();

}  // namespace diffq::core
