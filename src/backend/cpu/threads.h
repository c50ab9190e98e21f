// The CPU backend's names for the host thread pool (src/core/thread_pool.h), which its kernels split
// their work over.
#pragma once

#include "core/thread_pool.h"

namespace diffq::backend::cpu {

using core::in_parallel_region;
using core::num_threads;
using core::parallel_for;
using core::set_num_threads;

}  // namespace diffq::backend::cpu
