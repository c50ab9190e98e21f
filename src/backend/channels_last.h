// Channels-last image ops (ops::ImageLayout, attrs.i1) on kernels written for channels-first images:
// the backends' fallback where they have no native channels-last kernel for a case.
#pragma once

#include "ops/op.h"

namespace diffq::backend {

// Whether an image op's call (conv2d, group_norm, upsample_nearest2x) is channels-last.
inline bool is_channels_last(const ops::OpCall& c) {
  return c.attrs.i1 == int64_t(ops::ImageLayout::channels_last);
}

// Runs a channels-last call on `channels_first`, a kernel of the same op for [N, C, ...] images: x (and
// conv2d's residual) copied to channels-first on the op's device, the kernel run into a channels-first
// temporary, which is then copied into out ([N, ..., C]). The kernel's values; two more passes over memory.
void run_channels_first(const ops::OpCall& c, Tensor& out, ops::KernelFn channels_first);

}  // namespace diffq::backend
