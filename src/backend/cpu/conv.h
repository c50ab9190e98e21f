// conv2d's CPU kernel choice (conv.cpp): oneDNN's convolution primitive (onednn_conv.h) or diffq's
// im2col / implicit GEMM on its own GEMMs, per element type, by tuning.h's ConvKernel.
#pragma once

#include <string>

#include "backend/cpu/tuning.h"
#include "diffq/dtype.h"

namespace diffq::backend::cpu {

// Whether a conv2d with bf16 (else f32) input and weights runs on oneDNN's convolution under `t`
// (best: where it measured faster for that dtype on this CPU class; a oneDNN without a native
// convolution for the dtype here always leaves it to the GEMM path).
bool conv_uses_onednn(bool bf16, const Tuning& t);

// What computes conv2d of bf16 (else f32) here under the current tuning, for `diffq info`.
std::string conv_kernel_name(bool bf16);

// Whether convolutions of `dtype` run faster on channels-last images here (the CPU's answer to
// ops::prefers_channels_last): under the current tuning's image_layout (tuning.h ImageLayoutChoice).
bool prefers_channels_last(DType dtype);

}  // namespace diffq::backend::cpu
