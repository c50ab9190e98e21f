// bitsandbytes LLM.int8() on the CPU (Bnb8bitWeight in Int8LinearMode::llm_int8; the format and its
// reference math: quant/bnb/bnb_int8.h): int8 activations with outlier columns, the int32 product of the
// codes through the f32 tile GEMM (exact below 2^24, as bitsandbytes' own), the int8_mm_dequant scaling,
// then the outlier columns in x's dtype. Checked against bitsandbytes' outputs (tests/quant).
#pragma once

#include "diffq/tensor.h"

namespace diffq::quant {
class Bnb8bitWeight;
}

namespace diffq::backend::cpu {

// y = Linear8bitLt(x) in x's dtype; the bias is cast to x's dtype first (Linear8bitLt does).
Tensor llm_int8_linear(const quant::Bnb8bitWeight& w, const Tensor& x, const Tensor& bias);

}  // namespace diffq::backend::cpu
