// What the CUDA backend's kernels accept, as host logic compiled in every build: for each op, the dtypes
// (and the few shape limits) its CUDA kernel takes. The dispatcher checks a call against it before running
// a CUDA kernel (so a call the GPU cannot run fails with one clear message naming op, dtypes and device,
// before anything is queued), and the fake device of the host-side placement tests enforces it too, so a
// pipeline that would stop on the GPU (an int64 cast, a 512-wide attention head) fails here, in CI.
// The GPU op tables keep it honest the other way: a case this refuses but the kernel could run fails there.
#pragma once

#include <string>

#include "ops/op.h"

namespace diffq::backend {

// Empty when the CUDA kernel of `c.kind` takes this call (producing `out_dtype`), else the reason.
std::string cuda_kernel_refuses(const ops::OpCall& c, DType out_dtype);

}  // namespace diffq::backend
