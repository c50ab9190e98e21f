// Registration of the CPU kernels, one function per op-family file.
#pragma once

#include "ops/op.h"

namespace diffq::backend::cpu {

using ops::Attrs;
using ops::OpCall;
using ops::OpKind;

void register_copy_kernels();   // copy.cpp

}  // namespace diffq::backend::cpu
