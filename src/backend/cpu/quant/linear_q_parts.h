// linear_q on the CPU delivered part by part (compile's GEMM prologue: the consumer's program runs on each
// part of y right after it is computed, "dequantize inside the GEMM"): the weight's tile linear plan
// (tile_linear_parts, with the CPU's row dequantizers) or int8dq's int8 GEMM parts. The values are
// linear_q's, bit for bit.
#pragma once

#include "backend/cpu/gemm.h"
#include "diffq/tensor.h"
#include "ops/packed_weight.h"

namespace diffq::backend::cpu {

// Whether linear_q_parts works for w (a weight with a tile linear plan, or torchao int8dq).
bool linear_q_has_parts(const ops::PackedWeight& w);
// y = linear_q(x, w, bias) part by part: parts.end gets f32 values already holding linear_q's rounding to
// x's dtype. Throws unless linear_q_has_parts(w).
void linear_q_parts(const ops::PackedWeight& w, const Tensor& x, const Tensor& bias, const GemmParts& parts);

}  // namespace diffq::backend::cpu
