// How a row-major GEMM is put to cuBLASLt (column-major), as plain data: gemm.cpp builds its matrix
// layouts from this, and tests/cuda/test_cuda_indexing.cpp checks it on the CPU by evaluating the
// column-major product cuBLASLt would compute with these layouts against the row-major result.
// Row-major D[M, N] is column-major D^T (N x M, ld N); cuBLASLt's A is the weight (linear: stored
// [N, K], used transposed; matmul: stored [K, N]) and its B is the activation X[M, K] (K x M, ld K).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include "backend/cuda/plan_cache.h"

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

// What a cuBLASLt plan (descriptor, layouts and the heuristic's algorithm) depends on: one plan per key is
// built on first use and reused by every later call of that shape (gemm.cpp), so no heuristic query
// runs per call. The bias pointer is not part of it (set per call); whether there is a bias is, since it
// selects the epilogue. Alignments are: the heuristic's algorithm may need 16-byte aligned operands.
struct GemmKey {
  int device = 0;
  int dtype = 0;  // DType as int: the operands' and the output's
  int64_t m = 0, n = 0, k = 0, batch = 1;
  bool w_nk = true, w_batched = false, bias = false;
  uint32_t align_w = 0, align_x = 0, align_d = 0;
  bool operator==(const GemmKey&) const = default;
};

struct GemmKeyHash {
  size_t operator()(const GemmKey& k) const {
    size_t h = 0;
    for (uint64_t v : {uint64_t(k.device), uint64_t(k.dtype), uint64_t(k.m), uint64_t(k.n), uint64_t(k.k),
                       uint64_t(k.batch), uint64_t(k.w_nk) | uint64_t(k.w_batched) << 1 | uint64_t(k.bias) << 2,
                       uint64_t(k.align_w), uint64_t(k.align_x), uint64_t(k.align_d)})
      hash_combine(h, v);
    return h;
  }
};

// The counters of gemm.cpp's plan cache (a GPU test checks that a repeated shape hits).
PlanCacheStats gemm_plan_cache_stats();

}  // namespace diffq::backend::cuda
