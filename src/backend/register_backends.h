// The one place that knows which backends this build has: the op dispatcher (src/ops/dispatch.cpp)
// asks it for every kernel table, the device registry (device_interface.h) for every device interface.
#pragma once

namespace diffq::backend {

// Registers every backend's kernels in the op table (called once by the dispatcher).
void register_all_kernels();

}  // namespace diffq::backend
