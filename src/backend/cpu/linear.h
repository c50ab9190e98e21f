// The linear op's computation with its output delivered part by part (compile's GEMM epilogue): the
// same operand preparation and the same GEMM calls as the linear kernel, so the same f32 values.
#pragma once

#include "backend/cpu/gemm.h"
#include "diffq/tensor.h"

namespace diffq::backend::cpu {

// y[M, N] = x[..., K] @ w[N, K]^T + bias[N] (bias optional), f32 accumulation, M = x.numel() / K.
// parts.begin gives where each part of y goes (the bias is written there before the GEMM adds to it,
// as the kernel does); parts.end receives it in f32, before any rounding to the op's output dtype.
void linear_parts(const Tensor& x, const Tensor& w, const Tensor& bias, const GemmParts& parts);

}  // namespace diffq::backend::cpu
