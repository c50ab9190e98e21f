// diffq's bf16 GEMM on the CPU's bf16 dot-product instruction (AVX512-BF16's vdpbf16ps: per f32 lane,
// acc += a[2i] * b[2i] + a[2i + 1] * b[2i + 1], products of bf16 exact in f32, f32 accumulation, as
// oneDNN's and so PyTorch's CPU bf16 linear computes it). One thread's share of a GEMM, like
// sgemm_blocked_bf16 (sgemm_kernel.h), with the same blocking; the operands are packed as bf16 pairs
// (two consecutive k of a row of op(A) / a column of op(B) in one 32-bit lane), so each instruction does
// twice the multiply-adds of an f32 FMA and the packed blocks take half the cache.
// gemm.cpp decides when it runs; the oracle is sgemm_reference (gemm.h).
#pragma once

#include <cstdint>

namespace diffq::backend::cpu {

// True where the CPU has AVX512-BF16 (with AVX-512 F/BW/VL, and the OS saves ZMM state) and Highway
// dispatch is not restricted below AVX-512 (DIFFQ_SIMD_TARGET=AVX2 / EMU128 turns it off, so the lower
// paths stay testable on this CPU).
bool bf16_dot_gemm_usable();

// C[m, n] = alpha * op(A) @ op(B) + beta * C on the calling thread, bf16 A and B (raw bits), f32 C,
// row-major with row strides in elements; beta == 0: C is written without being read. k <= 0:
// C = beta * C. Requires bf16_dot_gemm_usable(). Input denormals count as zero and denormal sums are
// flushed (the instruction's DAZ / FTZ), as in oneDNN's bf16 kernels.
void gemm_bf16_dot(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a,
                   int64_t lda, const uint16_t* b, int64_t ldb, float beta, float* c, int64_t ldc);

// The same with B given by its rows: B[kk, j] = b_rows[kk][b_col0 + j] (kk < k, j < n): an implicit
// convolution's B, whose rows are shifted views of the padded input (no im2col copy).
void gemm_bf16_dot_rows(bool trans_a, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a, int64_t lda,
                        const uint16_t* const* b_rows, int64_t b_col0, float beta, float* c, int64_t ldc);

}  // namespace diffq::backend::cpu
