// The linear op's computation with its output delivered part by part (compile's GEMM epilogue): the
// same operand preparation and the same GEMM calls as the linear kernel, so the same f32 values.
#pragma once

#include <optional>

#include "backend/cpu/gemm.h"
#include "diffq/tensor.h"

namespace diffq::backend::cpu {

// y[M, N] = x[..., K] @ w[N, K]^T + bias[N] (bias optional), f32 accumulation, M = x.numel() / K.
// parts.begin gives where each part of y goes (the bias is written there before the GEMM adds to it,
// as the kernel does); parts.end receives it in f32, before any rounding to the op's output dtype.
void linear_parts(const Tensor& x, const Tensor& w, const Tensor& bias, const GemmParts& parts);

// y [..., N] (bf16) = x [..., K] @ W^T + bias for bf16 x whose rows are GEMM rows, W [N, K] packed for
// oneDNN (onednn_gemm.h: onednn_pack_bf16_weight): the bias and one rounding inside oneDNN, as the bf16
// linear kernel on the plain W. False (out unchanged) where x is not such rows or oneDNN declines a part.
// act: linear_q_act's activation of the result (the unary op's values), applied slice by slice in cache.
// out defined on entry (ops::linear_q_into): a bf16 view of the result's shape whose rows have one stride is
// written in place (on false it may hold part of the result); any other out is replaced by a fresh result.
bool linear_bf16_packed(const Tensor& x, const uint16_t* w_packed, int64_t N, int64_t K, const Tensor& bias, Tensor& out,
                        std::optional<ops::UnaryFn> act = std::nullopt);
// The same part by part for compile's GEMM epilogue: parts.end receives the f32 values already rounded
// to bf16 (linear_q_parts' contract: what linear_bf16_packed writes). False, delivering nothing, where x
// is not such rows.
bool linear_bf16_packed_parts(const Tensor& x, const uint16_t* w_packed, int64_t N, int64_t K, const Tensor& bias,
                              const GemmParts& parts);

}  // namespace diffq::backend::cpu
