// int8 x int8 -> int32 GEMM (the matmul of dynamic int8 activation x int8 weight quantization, torch's
// _int_mm): C[M, N] = A[M, K] @ B[N, K]^T, exact integer arithmetic, row-major with row strides.
//
// Without AVX-512 VNNI the fast exact product is vpmaddwd: operands sign-extended to int16 (done while
// packing), pairs of products summed into int32 lanes (no saturation: |a*b + c*d| <= 2^15). The
// kernel packs A and B blocks (Mc x Kc, Nc x Kc) per thread, keeps a 16-column B panel in L1 and runs
// a 6 x 16 register tile; threads split the (M, N) macro tiles. The u8*s8 vpmaddubsw route is not used:
// it saturates int16 sums for full-range operands (torchao's reduce_range exists for that reason).
#pragma once

#include <cstdint>

namespace diffq::backend::cpu {

// C[m, n] = sum_k A[m, k] * B[n, k]. Multithreaded with the diffq thread count.
void gemm_s8s8s32(int64_t m, int64_t n, int64_t k, const int8_t* a, int64_t lda, const int8_t* b,
                  int64_t ldb, int32_t* c, int64_t ldc);

// Scalar reference (the tests' oracle).
void gemm_s8s8s32_reference(int64_t m, int64_t n, int64_t k, const int8_t* a, int64_t lda,
                            const int8_t* b, int64_t ldb, int32_t* c, int64_t ldc);

}  // namespace diffq::backend::cpu
