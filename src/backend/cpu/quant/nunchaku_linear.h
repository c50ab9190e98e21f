// Nunchaku's SVDQuant W4A4 linear on the CPU (the format and its reference, SvdqW4A4Weight::
// linear_reference: quant/nunchaku/nunchaku.h): the activations quantized per token and group of 64, the
// int4 x int4 products through the int8 GEMM one group at a time (int4 codes widened to int8; integer sums
// are exact, so only the float sums' order differs from the reference, and not in the int4 part), then the
// low-rank branch and the bias.
#pragma once

#include "diffq/tensor.h"

namespace diffq::quant::nunchaku {
class SvdqW4A4Weight;
}

namespace diffq::backend::cpu {

// x [..., K] -> [..., N] in x's dtype; the bias in the weight's layout (SvdqW4A4Weight::logical_bias).
Tensor svdq_w4a4_linear(const quant::nunchaku::SvdqW4A4Weight& w, const Tensor& x, const Tensor& bias);

}  // namespace diffq::backend::cpu
