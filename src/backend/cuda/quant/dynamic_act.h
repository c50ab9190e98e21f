// Kernels of the dynamically quantized linears on CUDA (torchao int8dq, fp8dq): activations to int8 codes with
// per-row (or per-tensor) symmetric scales and the epilogue of the int32 GEMM; activations through float8 (dynamic_act.cu; the value
// math in dynamic_act.cuh). Host-callable launchers on plain pointers, on the current device.
#pragma once

#include <cstdint>

#include "backend/cuda/quant/dequant_kernels.h"  // Float8Table
#include "diffq/dtype.h"

namespace diffq::backend::cuda {

// x [M, K] (xdt: f32, bf16 or f16, contiguous) -> q [M, K] int8 and scale [M] (or [1] when per_tensor) f32,
// the scales rounded through `cd` (the activation dtype) as choose_qparams does. minmax: 2 * M floats of
// scratch (per_tensor only; may be null otherwise).
void int8_quantize_activations(const void* x, DType xdt, int64_t M, int64_t K, bool per_tensor, DType cd, int8_t* q,
                               float* scale, float* minmax, int device);

// y [M, N] (out dtype) = round(out, c * x_scale[row]) * w_scale[n / w_block_rows] (+ bias[n]); c int32 [M, N];
// w_scale in wsdt (f32 / bf16 / f16); bias in bdt or nullptr.
void int8dq_epilogue(const int32_t* c, const float* x_scale, bool per_tensor, const void* w_scale, DType wsdt,
                     int64_t w_block_rows, const void* bias, DType bdt, int64_t M, int64_t N, void* y, DType out,
                     int device);

// x [M, K] -> out [M, K] f32: each value quantized to float8_e4m3fn with its row's (or the tensor's) scale
// (absmax / 448 rounded through hp, the activation dtype) and dequantized, as torchao's fp8dq prepares the
// activations of _scaled_mm. scale: [M] or [1]; amax: M floats of scratch (per_tensor only; may be null).
void fp8_fake_quantize_activations(const void* x, DType xdt, int64_t M, int64_t K, bool per_tensor, DType hp,
                                   const Float8Table& f8, float* scale, float* amax, float* out, int device);

// The same quantization, kept as codes for cuBLASLt's float8 GEMM: codes [M, K] float8_e4m3fn bits, scale [M]
// or [1] as above.
void fp8_quantize_activation_codes(const void* x, DType xdt, int64_t M, int64_t K, bool per_tensor, DType hp,
                                   float* scale, float* amax, uint8_t* codes, int device);

// y [M, N] (out dtype) = round(out, acc * x_scale[row] * w_scale[n / w_block_rows] (+ bias[n])): the float8
// GEMM's f32 result on codes scaled back (blockq::fp8dq_output); bias in bdt or nullptr.
void fp8dq_epilogue(const float* acc, const float* x_scale, bool per_tensor, const float* w_scale, int64_t w_block_rows,
                    const void* bias, DType bdt, int64_t M, int64_t N, void* y, DType out, int device);

}  // namespace diffq::backend::cuda
