// Kernels of bitsandbytes' LLM.int8() linear on CUDA (linear_q_bnb.cpp): the activations' float16 values to
// int8 codes per row with outlier columns (found and listed in ascending order on the device: no host
// sync), the int32 product on cuBLASLt's IMMA GEMM (gemm_s8s8_s32), then one epilogue kernel that
// dequantizes it, adds the bias and the outlier columns' product in x's dtype. The value math is
// bnb_int8_values.cuh's. Host-callable launchers on plain pointers, on the current device and stream.
#pragma once

#include <cstdint>

#include "diffq/dtype.h"

namespace diffq::backend::cuda {

// x [M, K] (xdt: f32 / bf16 / f16, contiguous) -> q [M, Kp] int8 (columns K..Kp zero: the IMMA GEMM wants
// Kp % 4 == 0) and absmax [M] f32. With `sparse` (threshold > 0; thr16 the threshold rounded to float16)
// |A.to(float16)| >= thr16 is an outlier: zeroed before the row absmax, its column's codes zeroed when
// M > 1, and the columns holding one listed ascending in cols[0 .. *n_cols). Scratch: col_flags (K bytes).
// Without `sparse`, *n_cols = 0.
void bnb8_quantize_activations(const void* x, DType xdt, int64_t M, int64_t K, int64_t Kp, bool sparse, float thr16,
                               int8_t* q, float* absmax, uint8_t* col_flags, int32_t* cols, int32_t* n_cols,
                               int device);

// The weight codes [N, K] copied into [N, Kp] with zero columns after K.
void bnb8_pad_codes(const int8_t* w, int64_t N, int64_t K, int64_t Kp, int8_t* out, int device);

// y [M, N] (x's dtype ydt) from the int32 product acc [M, N]: blockq::bnb8_main (bias of dtype bdt or null),
// then with outlier columns (cols / n_cols from bnb8_quantize_activations) x[:, cols] times the dequantized
// weight columns (wq [N, K] codes, scb [N]) added and rounded again to ydt.
void bnb8_epilogue(const int32_t* acc, const float* absmax, const int8_t* wq, const float* scb, const void* bias,
                   DType bdt, const void* x, const int32_t* cols, const int32_t* n_cols, int64_t M, int64_t N,
                   int64_t K, void* y, DType ydt, int device);

}  // namespace diffq::backend::cuda
