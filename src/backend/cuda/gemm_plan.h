// How a row-major GEMM is put to cuBLASLt (column-major), as plain data: gemm.cpp builds its matrix
// layouts from this, and tests/cuda/test_cuda_indexing.cpp checks it on the CPU by evaluating the
// column-major product cuBLASLt would compute with these layouts against the row-major result.
// Row-major D[M, N] is column-major D^T (N x M, ld N); cuBLASLt's A is the weight (linear: stored
// [N, K], used transposed; matmul: stored [K, N]) and its B is the activation X[M, K] (K x M, ld K).
#pragma once

#include <cstdint>

namespace diffq::backend::cuda {

struct LtMatrix {
  uint64_t rows = 0, cols = 0;  // as stored, column-major
  int64_t ld = 0;
  int64_t batch_stride = 0;     // elements between batch entries (0 for a shared matrix)
};

struct GemmPlan {
  bool trans_a = false;  // op(A) = A^T
  LtMatrix a, b, d;
  int64_t batch = 1;
};

// D[batch][M, N] = X[batch][M, K] * (w_nk ? W^T with W stored [N, K] : W stored [K, N]); W carries
// the batch when w_batched. All operands contiguous.
inline GemmPlan plan_gemm(int64_t M, int64_t N, int64_t K, bool w_nk, bool w_batched, int64_t batch) {
  GemmPlan p;
  p.trans_a = w_nk;
  p.batch = batch;
  p.a = w_nk ? LtMatrix{uint64_t(K), uint64_t(N), K, 0} : LtMatrix{uint64_t(N), uint64_t(K), N, 0};
  p.a.batch_stride = w_batched ? N * K : 0;
  p.b = LtMatrix{uint64_t(K), uint64_t(M), K, M * K};
  p.d = LtMatrix{uint64_t(N), uint64_t(M), N, M * N};
  return p;
}

}  // namespace diffq::backend::cuda
