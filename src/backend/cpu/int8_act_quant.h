// Row kernels of dynamic int8 activation quantization (torchao's per-token symmetric Int8Tensor.from_hp
// on the CPU): a row's largest magnitude, and the row's int8 codes written straight into the A layout the int8
// GEMM reads (backend/cpu/int8_gemm.h): the tile's packed strips, or int8 rows for oneDNN. Inputs are f32 or bf16 rows (bf16 widened exactly). Scalar
// references live next to each kernel; the choice of scale (choose_qparams) stays with the caller.
#pragma once

#include <cstdint>

#include "diffq/dtype.h"

namespace diffq::backend::cpu {

// What torchao's symmetric choose_qparams takes from a row: max(-min(mn, 0), max(mx, 0)) of the row's min
// and max (left folds of std::min / std::max from +inf / -inf: NaN never wins), i.e. the largest |x[c]|
// over x[0, k) that is not NaN, 0 for none. The kernel reads bf16 rows as bits (|x| orders as the bits
// without the sign, NaNs above inf): a third of the float compares; the reference folds min and max.
float int8_row_abs_max(const void* x, DType src, int64_t k);
float int8_row_abs_max_reference(const void* x, DType src, int64_t k);

// q[c] = int8(clamp(nearbyint(x[c] * recip), -128, 127)), NaN -> 0 (the product in f32, rounding half to
// even), written as row r (0..5) of the packed A strip at `strip`. x == nullptr writes a zero row.
void int8_quantize_row_packed(const void* x, DType src, int64_t k, float recip, int16_t* strip, int64_t r);
// The same codes as plain int8 (row-major A for oneDNN's int8 matmul), and its scalar reference.
void int8_quantize_row(const void* x, DType src, int64_t k, float recip, int8_t* q);
void int8_quantize_row_reference(const void* x, DType src, int64_t k, float recip, int8_t* q);

}  // namespace diffq::backend::cpu
