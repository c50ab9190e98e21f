// The execution device of a pipeline (Diffusers' pipe.to(device) / _execution_device), shared by every
// pipeline: the checks made before anything loads or moves, and the placement of the components'
// weights. A device that this build or machine cannot run, an op without a kernel there, or a quantized
// scheme without a linear kernel there is a clear error at load, naming the op or scheme and the device:
// never a silent CPU run.
#pragma once

#include "diffq/device.h"
#include "diffq/pipeline.h"
#include "offload/pipeline_offloader.h"

namespace diffq {

// check_execution_device(d) (include/diffq/pipeline.h) is the check made before anything loads.

// Uploads every parameter of the components to `d` (dense weights in their loaded dtype: the bytes are
// copied straight from the mmap or host buffer into the device, then swapped into the same Storage);
// `Device::cpu()` brings them home. Before moving anything, checks that every quantized parameter's
// scheme has a linear kernel on `d` (throws naming component, parameter, scheme and device).
void place_components(const offload::NamedModules& components, Device d);

}  // namespace diffq
