// Int8DynamicActivationInt8WeightConfig's forward (torchao_int8dq) as torchao runs it on the CPU (Int8Tensor
// linear with act_quant_kwargs): activations quantized per token (or per tensor) with Int8Tensor.from_hp's
// symmetric math in the activation dtype, torch._int_mm (our int8 GEMM, int8_gemm.h), then
//   y = ((float(c) * x_scale) cast to x's dtype) * w_scale + bias, cast to x's dtype.
// The weight (AffineInt8Weight) and its format math live in quant/torchao; the activation quantization's
// scalar reference is quantize_activations_int8 below.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "backend/cpu/gemm.h"
#include "diffq/tensor.h"
#include "ops/op.h"

namespace diffq::quant::torchao {
class AffineInt8Weight;
}

namespace diffq::backend::cpu {

// Per-token (per_tensor=false) or per-tensor symmetric int8 quantization of x [M, K] (values already
// widened to f32, `dt` their dtype): q [M, K], scale [M] (or [1]) in f32.
void quantize_activations_int8(const float* x, int64_t m, int64_t k, DType dt, bool per_tensor, int8_t* q,
                               std::vector<float>& scale);

// act: linear_q_act's activation of the output, applied block by block right after the epilogue.
Tensor int8_dynamic_linear(const Tensor& x, const Tensor& bias, const quant::torchao::AffineInt8Weight& w,
                           std::optional<ops::UnaryFn> act = std::nullopt);
// The same values part by part (compile's GEMM epilogue): parts.end gets f32 values already rounded to
// x's dtype, the int8 GEMM's thread shares as parts.
void int8_dynamic_linear_parts(const Tensor& x, const Tensor& bias, const quant::torchao::AffineInt8Weight& w,
                               const GemmParts& parts);

}  // namespace diffq::backend::cpu
