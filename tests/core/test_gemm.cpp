// sgemm and gemm_bf16 (src/backend/cpu/gemm.h) against the f64-accumulating sgemm_reference: every
// transpose combination, odd sizes, leading dimensions larger than the row length, alpha/beta, and
// operands large enough that gemm_bf16 splits them into several widened blocks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/gemm.h"
#include "common/uniform_vec.h"
#include "backend/cpu/threads.h"
#include "backend/cpu/tuning.h"
#include "diffq/dtype.h"

namespace cpu = diffq::backend::cpu;

namespace {

using diffq::testing::uniform_vec;

struct Case {
  bool ta, tb;
  int64_t m, n, k;
};

// Runs one case through f32 (bf16=false) or bf16 inputs and compares C with the reference
// (sgemm_reference; or sgemm on the exact f32 values when sgemm_oracle, for sizes where the scalar
// reference would be too slow — sgemm itself is checked against the reference above).
void check_case(const Case& cs, bool bf16, float alpha, float beta, bool sgemm_oracle = false) {
  const int64_t pad = 3;
  const int64_t a_rows = cs.ta ? cs.k : cs.m, a_cols = cs.ta ? cs.m : cs.k;
  const int64_t b_rows = cs.tb ? cs.n : cs.k, b_cols = cs.tb ? cs.k : cs.n;
  const int64_t lda = a_cols + pad, ldb = b_cols + pad, ldc = cs.n + pad;
  auto a = uniform_vec(size_t(a_rows * lda), 1), b = uniform_vec(size_t(b_rows * ldb), 2);
  std::vector<uint16_t> ah(a.size()), bh(b.size());
  if (bf16) {  // the f32 operands become exactly the bf16 values
    for (size_t i = 0; i < a.size(); ++i) ah[i] = diffq::f32_to_bf16(a[i]), a[i] = diffq::bf16_to_f32(ah[i]);
    for (size_t i = 0; i < b.size(); ++i) bh[i] = diffq::f32_to_bf16(b[i]), b[i] = diffq::bf16_to_f32(bh[i]);
  }
  const auto c0 = uniform_vec(size_t(cs.m * ldc), 3);
  auto c = c0, ref = c0;
  (sgemm_oracle ? cpu::sgemm : cpu::sgemm_reference)(cs.ta, cs.tb, cs.m, cs.n, cs.k, alpha, a.data(),
                                                     lda, b.data(), ldb, beta, ref.data(), ldc);
  if (bf16)
    cpu::gemm_bf16(cs.ta, cs.tb, cs.m, cs.n, cs.k, alpha, ah.data(), lda, bh.data(), ldb, beta, c.data(),
                   ldc);
  else
    cpu::sgemm(cs.ta, cs.tb, cs.m, cs.n, cs.k, alpha, a.data(), lda, b.data(), ldb, beta, c.data(), ldc);
  const double tol = 1e-5 + 2e-6 * double(cs.k);
  int bad = 0;
  for (int64_t i = 0; i < cs.m; ++i) {
    for (int64_t j = 0; j < ldc; ++j) {
      const size_t idx = size_t(i * ldc + j);
      if (j >= cs.n) {  // padding between rows is never written
        if (std::memcmp(&c[idx], &c0[idx], 4) != 0 && ++bad < 5)
          ADD_FAILURE() << "wrote padding at (" << i << ", " << j << ")";
        continue;
      }
      if (!(std::fabs(double(c[idx]) - double(ref[idx])) <= tol) && ++bad < 5)
        ADD_FAILURE() << (bf16 ? "gemm_bf16" : "sgemm") << " ta=" << cs.ta << " tb=" << cs.tb
                      << " m=" << cs.m << " n=" << cs.n << " k=" << cs.k << " at (" << i << ", " << j
                      << "): " << c[idx] << " vs " << ref[idx];
    }
  }
  EXPECT_EQ(bad, 0) << "ta=" << cs.ta << " tb=" << cs.tb << " m=" << cs.m << " n=" << cs.n
                    << " k=" << cs.k;
}

std::vector<Case> odd_cases() {
  std::vector<Case> out;
  const int64_t sizes[] = {1, 7, 33, 130};
  for (const bool ta : {false, true})
    for (const bool tb : {false, true})
      for (const int64_t m : sizes)
        for (const int64_t n : sizes)
          for (const int64_t k : sizes) out.push_back({ta, tb, m, n, k});
  return out;
}

}  // namespace

TEST(Gemm, SgemmMatchesReference) {
  for (const auto& cs : odd_cases()) check_case(cs, false, 1.0f, 0.0f);
}

TEST(Gemm, SgemmAlphaBeta) {
  for (const auto& cs : odd_cases()) check_case(cs, false, -0.75f, 0.5f);
}

TEST(Gemm, Bf16MatchesReference) {
  for (const auto& cs : odd_cases()) check_case(cs, true, 1.0f, 0.0f);
}

TEST(Gemm, Bf16AlphaBeta) {
  for (const auto& cs : odd_cases()) check_case(cs, true, -0.75f, 0.5f);
}

// Long enough rows (k) that gemm_bf16 widens A and/or B in several blocks (208 rows at k = 20000,
// 64 at k = 65536), with partial last blocks, in both loop orders.
TEST(Gemm, Bf16Blocked) {
  for (const bool ta : {false, true})
    for (const bool tb : {false, true}) {
      check_case({ta, tb, 450, 7, 20000}, true, 1.0f, 0.25f, true);
      check_case({ta, tb, 7, 450, 20000}, true, 1.0f, 0.0f, true);
    }
  check_case({false, true, 130, 130, 65536}, true, 0.5f, 0.0f, true);
  check_case({true, false, 130, 130, 65536}, true, 1.0f, -1.0f, true);
}

TEST(Gemm, OneAndTwoThreadsAgree) {
  for (const int t : {1, 2}) {
    cpu::set_num_threads(t);
    check_case({false, true, 130, 130, 130}, false, 1.0f, 0.0f);
    check_case({false, true, 130, 130, 130}, true, 1.0f, 0.0f);
  }
  cpu::set_num_threads(0);
}

// sgemm splits C over the pool's threads (along the longer side, at multiples of 16), uneven splits
// included: every thread count gives the reference result, and the same thread count gives the same
// bits on every call (the split is static). Different thread counts may differ in the last bits
// (OpenBLAS's edge kernels sum in another order), as with any threaded BLAS.
TEST(Gemm, ThreadSplitsAreRightAndDeterministic) {
  const Case cases[] = {{false, true, 300, 47, 200}, {true, false, 47, 300, 200},
                        {false, false, 1000, 17, 64}, {true, true, 33, 1000, 40}};
  for (const int t : {1, 2, 3}) {
    cpu::set_num_threads(t);
    for (const auto& cs : cases) {
      check_case(cs, false, 1.0f, 0.0f);
      const int64_t a_rows = cs.ta ? cs.k : cs.m, a_cols = cs.ta ? cs.m : cs.k;
      const int64_t b_rows = cs.tb ? cs.n : cs.k, b_cols = cs.tb ? cs.k : cs.n;
      const auto a = uniform_vec(size_t(a_rows * a_cols), 5), b = uniform_vec(size_t(b_rows * b_cols), 6);
      std::vector<float> c1(size_t(cs.m * cs.n)), c2(c1.size());
      for (auto* c : {&c1, &c2})
        cpu::sgemm(cs.ta, cs.tb, cs.m, cs.n, cs.k, 1.f, a.data(), a_cols, b.data(), b_cols, 0.f, c->data(), cs.n);
      EXPECT_EQ(std::memcmp(c1.data(), c2.data(), c1.size() * 4), 0)
          << t << " threads, m=" << cs.m << " n=" << cs.n << " k=" << cs.k;
    }
  }
  cpu::set_num_threads(0);
}

// Every split the autotuner may pick (backend/cpu/tuning.h) computes the same product: rows, columns,
// longer side, none, and several parts per thread, checked against the f64 reference with 2 threads.
TEST(Gemm, EveryTunedSplitIsRight) {
  const cpu::Tuning defaults = cpu::current_tuning();
  const Case cases[] = {{false, true, 300, 47, 200}, {true, false, 47, 300, 200}, {false, false, 130, 250, 64}};
  cpu::set_num_threads(2);
  for (const auto split : {cpu::GemmSplit::longer_side, cpu::GemmSplit::rows, cpu::GemmSplit::cols,
                           cpu::GemmSplit::none})
    for (const int ppt : {1, 3}) {
      cpu::Tuning t;
      t.gemm_split = split;
      t.gemm_parts_per_thread = ppt;
      cpu::ScopedTuning scope(t);
      EXPECT_EQ(cpu::current_tuning(), t);
      for (const auto& cs : cases) check_case(cs, false, 0.5f, 0.25f);
    }
  EXPECT_EQ(cpu::current_tuning(), defaults);  // scopes restore the defaults
  cpu::set_num_threads(0);
}
