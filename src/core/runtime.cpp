#include "diffq/runtime.h"

#include "backend/cpu/threads.h"

namespace diffq {

int num_threads() { return backend::cpu::num_threads(); }
void set_num_threads(int n) { backend::cpu::set_num_threads(n); }

}  // namespace diffq
