// Row kernels of dynamic int8 activation quantization (torchao's per-token symmetric Int8Tensor.from_hp
// on the CPU): a row's min / max, and the row's int8 codes written straight into the A layout the int8
// GEMM reads (backend/cpu/int8_gemm.h): the tile's packed strips, or int8 rows for oneDNN. Inputs are f32 or bf16 rows (bf16 widened exactly). Scalar
// references live next to each kernel; the choice of scale (choose_qparams) stays with the caller.
#pragma once

#include <cstdint>

#include "diffq/dtype.h"

namespace diffq::backend::cpu {

// mn / mx = left folds of std::min / std::max over x[0, k) starting from +inf / -inf (NaN never wins).
void int8_row_min_max(const void* x, DType src, int64_t k, float* mn, float* mx);
void int8_row_min_max_reference(const void* x, DType src, int64_t k, float* mn, float* mx);

// q[c] = int8(clamp(nearbyint(x[c] * recip), -128, 127)), NaN -> 0 (the product in f32, rounding half to
// even), written as row r (0..5) of the packed A strip at `strip`. x == nullptr writes a zero row.
void int8_quantize_row_packed(const void* x, DType src, int64_t k, float recip, int16_t* strip, int64_t r);
// The same codes as plain int8 (row-major A for oneDNN's int8 matmul), and its scalar reference.
void int8_quantize_row(const void* x, DType src, int64_t k, float recip, int8_t* q);
void int8_quantize_row_reference(const void* x, DType src, int64_t k, float recip, int8_t* q);

}  // namespace diffq::backend::cpu
