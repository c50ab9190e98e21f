// The int8 x int8 -> int32 GEMM against its scalar reference: odd M/N/K (edges of every block and
// register tile), extreme values (-128 * -128 sums, the vpmaddwd pair limit), strided operands.
#include <gtest/gtest.h>

#include <random>
#include <tuple>
#include <vector>

#include "backend/cpu/int8_gemm.h"
#include "backend/cpu/threads.h"

namespace {

namespace cpu = diffq::backend::cpu;

void check_case(int64_t M, int64_t N, int64_t K, int fill, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dist(-128, 127);
  const int64_t lda = K + 3, ldb = K + 1, ldc = N + 2;
  std::vector<int8_t> a(size_t(M * lda)), b(size_t(N * ldb));
  for (auto& v : a) v = int8_t(fill == 0 ? dist(rng) : fill == 1 ? -128 : 127);
  for (auto& v : b) v = int8_t(fill == 0 ? dist(rng) : fill == 1 ? -128 : -128);
  std::vector<int32_t> c(size_t(M * ldc), 7), ref(size_t(M * ldc), 7);
  cpu::gemm_s8s8s32(M, N, K, a.data(), lda, b.data(), ldb, c.data(), ldc);
  cpu::gemm_s8s8s32_reference(M, N, K, a.data(), lda, b.data(), ldb, ref.data(), ldc);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j)
      ASSERT_EQ(c[i * ldc + j], ref[i * ldc + j]) << "M=" << M << " N=" << N << " K=" << K << " at " << i << "," << j;
  // The padding between rows is never written.
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = N; j < ldc; ++j) ASSERT_EQ(c[i * ldc + j], 7);
}

TEST(Int8Gemm, MatchesReferenceOnOddShapes) {
  for (int threads : {1, 2}) {
    cpu::set_num_threads(threads);
    for (auto [M, N, K] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1}, {5, 17, 3}, {7, 33, 513}, {97, 257, 1030},
                           {13, 300, 96}, {200, 40, 2049}, {6, 16, 512}})
      check_case(M, N, K, 0, uint32_t(M * 131 + N * 7 + K));
  }
  cpu::set_num_threads(0);
}

TEST(Int8Gemm, ExtremeValuesDoNotSaturate) {
  // -128 * -128 everywhere: each vpmaddwd pair is 2^15, sums reach 2^14 * K.
  for (auto [M, N, K] : {std::tuple<int64_t, int64_t, int64_t>{7, 19, 3073}, {1, 5, 2}}) {
    check_case(M, N, K, 1, 1);
    check_case(M, N, K, 2, 2);
  }
}

TEST(Int8Gemm, EmptyKGivesZeros) {
  std::vector<int8_t> a(4), b(4);
  std::vector<int32_t> c(6, 9);
  cpu::gemm_s8s8s32(2, 3, 0, a.data(), 0, b.data(), 0, c.data(), 3);
  for (int32_t v : c) EXPECT_EQ(v, 0);
}

}  // namespace
