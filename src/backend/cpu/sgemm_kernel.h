// diffq's own f32 GEMM (BLIS-style blocking, Highway runtime dispatch), one thread's share of a GEMM:
// sgemm / gemm_bf16 (gemm.h) split C over the pool and call this per part where it measures faster
// than OpenBLAS (gemm.cpp decides).
//
// Loops: C's columns in blocks of kNc; K in equal blocks of at most kKc; per (column, K) block op(B) is
// packed once into panels of NR columns (NR = 2 vectors: 16 on AVX2, 32 on AVX-512, 8 on EMU128),
// k-major, so a panel (kKc x NR) sits in L1; per block of kMc rows op(A) is packed into strips of 6
// rows (k-major, L2-resident); a 6 x NR register tile (12 vector accumulators, one FMA per vector per
// k) runs for every strip against every panel. K blocks after the first accumulate into C. Edge
// tiles are computed in full on zero-padded packs and only their valid part is written.
//
// bf16 operands (raw bits) are widened (exactly) while packing, so they cost no extra pass.
#pragma once

#include <cstdint>

namespace diffq::backend::cpu {

// C[m, n] = alpha * op(A) @ op(B) + beta * C on the calling thread, row-major with row strides (in
// elements). beta == 0: C is written without being read (NaN there is ignored). k <= 0: C = beta * C.
// For a given target, shape and operands the result does not depend on where C lives or its stride.
void sgemm_blocked(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                   int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
void sgemm_blocked_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                        const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, float beta, float* c,
                        int64_t ldc);

}  // namespace diffq::backend::cpu
