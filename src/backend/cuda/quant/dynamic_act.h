// Kernels of the dynamically quantized int8 linear on CUDA (torchao int8dq): activations to int8 codes with
// per-row (or per-tensor) symmetric scales, and the epilogue of the int32 GEMM (dynamic_act.cu; the value
// math in dynamic_act.cuh). Host-callable launchers on plain pointers, on the current device.
#pragma once

#include <cstdint>

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

}  // namespace diffq::backend::cuda
