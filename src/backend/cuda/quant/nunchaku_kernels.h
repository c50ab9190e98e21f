// Kernels of Nunchaku's SVDQuant W4A4 linear on CUDA (linear_q_nunchaku.cpp), value for value the CPU's
// (backend/cpu/quant/nunchaku_linear.cpp; the value math is nunchaku_values.cuh's): the activations
// smoothed and quantized to int4 per token and group of 64, the int4 x int4 group sums (exact int32, dp4a)
// folded into f32 outputs in group order, the low-rank branch, the bias. Host-callable launchers on plain
// pointers, on the current device and stream.
#pragma once

#include <cstdint>

#include "diffq/dtype.h"

namespace diffq::backend::cuda {

// x [M, K] (xdt: f32 / bf16 / f16, contiguous; K % 64 == 0), smooth f32 [K] -> q int8 [M, K] codes in
// [-8, 7], ascale f32 [M, K/64] (blockq::svdq_quantize_group per token and group).
void svdq_quantize_activations(const void* x, DType xdt, const float* smooth, int64_t M, int64_t K, int8_t* q,
                               float* ascale, int device);

// out f32 [M, N] = sum over groups g in order of (float(q[t, g] . codes[n, g]) * ascale[t, g]) * wscales[g, n]
// (codes int8 [N, K], wscales f32 [K/64, N]): shared-memory tiles of 32 x 32 outputs, dp4a on 4 codes a word
// (q and codes 4-byte aligned).
void svdq_int4_gemm(const int8_t* q, const float* ascale, const int8_t* codes, const float* wscales, int64_t M,
                    int64_t N, int64_t K, float* out, int device);
// The same, one thread per output with plain loops: the reference of the tiled kernel (and its fallback for
// operands off a 4-byte boundary).
void svdq_int4_gemm_reference(const int8_t* q, const float* ascale, const int8_t* codes, const float* wscales,
                              int64_t M, int64_t N, int64_t K, float* out, int device);

// la f32 [M, R] = x [M, K] (its own values, xdt) . down [R, K] (f32), each sum in index order.
void svdq_lowrank_down(const void* x, DType xdt, const float* down, int64_t M, int64_t K, int64_t R, float* la,
                       int device);

// y [M, N] (ydt) = (main + la[t] . up[n]) + bias[svdq_vector_index(n, packed)] (bias of dtype bdt or null: 0),
// rounded to ydt; main f32 [M, N], up f32 [N, R] (R may be 0: la and up unused).
void svdq_epilogue(const float* main, const float* la, const float* up, const void* bias, DType bdt, bool packed,
                   int64_t M, int64_t N, int64_t R, void* y, DType ydt, int device);

}  // namespace diffq::backend::cuda
