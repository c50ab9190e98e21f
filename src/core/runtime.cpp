#include "diffq/runtime.h"

#include "core/thread_pool.h"

namespace diffq {

int num_threads() { return core::num_threads(); }
void set_num_threads(int n) { core::set_num_threads(n); }

}  // namespace diffq
