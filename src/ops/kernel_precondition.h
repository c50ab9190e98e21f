// A device kind's check of a call before its kernel runs: empty when the kernel takes it, else the reason
// (the CUDA backend's rules: cuda_kernel_rules.h in src/backend, installed at registration).
// ops::execute turns a reason into an Error naming the op and the device, before anything is queued.
#pragma once

#include <string>

#include "ops/op.h"

namespace diffq::ops {

using KernelPrecondition = std::string (*)(const OpCall&, DType out_dtype);
// Installs `p` for device kind `d` (nullptr: none) and returns the previous one (tests' fake devices
// install the CUDA rules and restore what was there).
KernelPrecondition set_kernel_precondition(DeviceKind d, KernelPrecondition p);

}  // namespace diffq::ops
