#include "backend/cpu/kernels.h"

namespace diffq::backend::cpu {

void register_kernels() {
  register_copy_kernels();
}

}  // namespace diffq::backend::cpu
