// Dequantization kernels of the quantized linears on CUDA (linear_q: the weight dequantized into a buffer
// of the activation's dtype, then the dense cuBLASLt GEMM). Host-callable launchers on plain pointers, so
// the scheme-side host code (linear_q_*.cpp) never goes through nvcc.
#pragma once

#include <cstdint>

#include "diffq/dtype.h"

namespace diffq::backend::cuda {

// torchao's affine int8 codes (Int8Tensor / IntxUnpackedToInt8Tensor): W[n, k] = dequantize_one(q[n, k],
// zp[b], scale[b]) with block b = (n / bn) * (K / bk) + k / bk, exactly torchao's dequantize(out) (affine.h):
// (q - zp) rounded to `out`, times the scale in the promoted dtype, rounded to `out`. On the current device.
void dequant_affine_int8(const int8_t* q, const void* scale, DType scale_dtype, const int8_t* zp, int64_t N,
                         int64_t K, int64_t bn, int64_t bk, void* out, DType out_dtype, int device);

// The 256 values of a float8 dtype's codes as f32 (the host's f8_to_f32, so every code, NaN included,
// decodes to the CPU's bits), passed by value to the kernel.
struct Float8Table {
  float v[256];
};

// torchao's Float8Tensor weight: W[n, k] = round_through(round_dtype, table[q[n, k]] * scale[b]) stored as
// out_dtype, block b = (n / bn) * (K / bk) + k / bk, scale f32 (torchao's dequantize(round_dtype)).
void dequant_float8(const uint8_t* q, const Float8Table& table, const float* scale, int64_t N, int64_t K,
                    int64_t bn, int64_t bk, DType round_dtype, void* out, DType out_dtype, int device);

}  // namespace diffq::backend::cuda
