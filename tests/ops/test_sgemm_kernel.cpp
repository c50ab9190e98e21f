// diffq's blocked f32 GEMM (backend/cpu/sgemm_kernel.h) against the f64 scalar reference
// (sgemm_reference) on every SIMD target the CPU runs: edge tiles (m, n, k of 1, 5, 7, 17, 33, 100 and
// sizes past the cache blocks), all four transpose combinations, row strides wider than the rows (the
// padding must stay untouched), alpha / beta (beta = 0 ignores NaN in C), k = 0, bf16 operands. Also
// sgemm / gemm_bf16 with the blocked kernel forced, on 1 and 2 threads: sgemm_parts and gemm_bf16_parts
// give the same bits, and repeated calls are identical.
#include <gtest/gtest.h>
#include <hwy/targets.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/gemm.h"
#include "backend/cpu/sgemm_kernel.h"
#include "backend/cpu/threads.h"
#include "backend/cpu/tuning.h"
#include "gemm_test_problem.h"

namespace cpu = diffq::backend::cpu;

namespace {

using namespace gemm_test;

std::vector<Dims> edge_dims() {
  std::vector<Dims> out;
  const int64_t sizes[] = {1, 5, 7, 17, 33, 100};
  for (const int64_t m : sizes)
    for (const int64_t n : sizes)
      for (const int64_t k : {int64_t(1), int64_t(7), int64_t(33)}) out.push_back({m, n, k});
  // Past the cache blocks: several K blocks (600 -> 3 x 200, 1030 -> 5 x 206), more than one M block
  // (150 > 144 rows), more than one N block (3100 > 3072 columns).
  out.push_back({150, 40, 600});
  out.push_back({13, 70, 1030});
  out.push_back({7, 3100, 3});
  out.push_back({100, 100, 100});
  return out;
}

class EveryTarget : public ::testing::Test {
 protected:
  template <class F>
  void for_each_target(F f) {
    const std::vector<int64_t> targets = hwy::SupportedAndGeneratedTargets();
    ASSERT_FALSE(targets.empty());
    for (const int64_t target : targets) {
      hwy::SetSupportedTargetsForTest(target);
      SCOPED_TRACE(hwy::TargetName(target));
      f();
    }
    hwy::SetSupportedTargetsForTest(0);  // back to the CPU's own targets
  }
};

using SgemmKernel = EveryTarget;

TEST_F(SgemmKernel, BlockedMatchesReferenceAtEdges) {
  for_each_target([] {
    uint32_t seed = 1;
    for (const Dims& d : edge_dims())
      for (const bool ta : {false, true})
        for (const bool tb : {false, true}) {
          const float alpha = (seed % 3 == 0) ? -0.75f : 1.0f;
          const float beta = (seed % 2 == 0) ? 0.0f : 0.5f;
          const Problem p(ta, tb, d, alpha, beta, seed++);
          std::vector<float> c = p.c0;
          cpu::sgemm_blocked(ta, tb, d.m, d.n, d.k, alpha, p.a.data(), p.lda, p.b.data(), p.ldb, beta, c.data(), p.ldc);
          p.check(c, p.name());
          if (::testing::Test::HasFailure()) return;
        }
  });
}

TEST_F(SgemmKernel, Bf16OperandsMatchReference) {
  for_each_target([] {
    uint32_t seed = 100;
    for (const Dims& d : {Dims{1, 1, 1}, Dims{17, 33, 7}, Dims{100, 5, 33}, Dims{150, 40, 600}, Dims{6, 16, 16}})
      for (const bool ta : {false, true})
        for (const bool tb : {false, true}) {
          const Problem p(ta, tb, d, 1.0f, seed % 2 ? 0.0f : 2.0f, seed, /*bf16_values=*/true);
          ++seed;
          std::vector<float> c = p.c0;
          cpu::sgemm_blocked_bf16(ta, tb, d.m, d.n, d.k, p.alpha, p.a16.data(), p.lda, p.b16.data(), p.ldb, p.beta,
                                  c.data(), p.ldc);
          p.check(c, "bf16 " + p.name());
        }
  });
}

TEST_F(SgemmKernel, ZeroDepthScalesC) {
  for_each_target([] {
    for (const float beta : {0.0f, 0.5f}) {
      const Problem p(false, true, Dims{7, 17, 0}, 1.0f, beta, 7);
      std::vector<float> c = p.c0;
      cpu::sgemm_blocked(false, true, 7, 17, 0, 1.0f, p.a.data(), p.lda, p.b.data(), p.ldb, beta, c.data(), p.ldc);
      p.check(c, "k=0");
      for (int64_t i = 0; i < 7; ++i)
        for (int64_t j = 0; j < 17; ++j)
          EXPECT_EQ(c[size_t(i * p.ldc + j)], beta == 0.0f ? 0.0f : beta * p.c0[size_t(i * p.ldc + j)]);
    }
  });
}

// sgemm / gemm_bf16 with the blocked kernel forced, split over 1 and 2 threads.
class BlockedThroughGemm : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    cpu::set_num_threads(GetParam());
    tuning_.gemm_kernel = cpu::GemmKernel::diffq;
  }
  void TearDown() override { cpu::set_num_threads(0); }
  cpu::Tuning tuning_;
};

TEST_P(BlockedThroughGemm, SgemmMatchesReferenceAndPartsAreBitIdentical) {
  const cpu::ScopedTuning scope(tuning_);
  uint32_t seed = 300;
  for (const Dims& d : {Dims{1152 / 8, 768 / 8, 768 / 4}, Dims{100, 200, 33}, Dims{5, 300, 17}, Dims{300, 5, 600},
                        Dims{64, 64, 64}})
    for (const bool ta : {false, true})
      for (const bool tb : {false, true})
        for (const float beta : {0.0f, 0.5f}) {
          ASSERT_TRUE(cpu::gemm_uses_diffq_kernel(false, d.m, d.n, cpu::current_tuning()));
          const Problem p(ta, tb, d, 1.5f, beta, seed++);
          std::vector<float> c = p.c0;
          cpu::sgemm(ta, tb, d.m, d.n, d.k, p.alpha, p.a.data(), p.lda, p.b.data(), p.ldb, beta, c.data(), p.ldc);
          p.check(c, p.name());
          std::vector<float> again = p.c0;
          cpu::sgemm(ta, tb, d.m, d.n, d.k, p.alpha, p.a.data(), p.lda, p.b.data(), p.ldb, beta, again.data(), p.ldc);
          EXPECT_EQ(0, std::memcmp(c.data(), again.data(), c.size() * 4)) << "repeat " << p.name();
          std::vector<float> byparts = p.c0;
          std::vector<std::vector<float>> tiles;
          tiles.reserve(64);
          cpu::sgemm_parts(ta, tb, d.m, d.n, d.k, p.alpha, p.a.data(), p.lda, p.b.data(), p.ldb, beta,
                           scratch_parts(byparts, p.ldc, beta, tiles));
          for (int64_t i = 0; i < d.m; ++i)
            EXPECT_EQ(0, std::memcmp(c.data() + i * p.ldc, byparts.data() + i * p.ldc, size_t(d.n) * 4))
                << "sgemm_parts row " << i << " " << p.name();
        }
}

TEST_P(BlockedThroughGemm, GemmBf16MatchesReferenceAndParts) {
  const cpu::ScopedTuning scope(tuning_);
  uint32_t seed = 500;
  for (const Dims& d : {Dims{150, 96, 300}, Dims{7, 33, 5}, Dims{64, 256, 64}})
    for (const bool ta : {false, true})
      for (const bool tb : {false, true}) {
        const Problem p(ta, tb, d, 1.0f, 0.0f, seed++, /*bf16_values=*/true);
        std::vector<float> c = p.c0;
        cpu::gemm_bf16(ta, tb, d.m, d.n, d.k, 1.0f, p.a16.data(), p.lda, p.b16.data(), p.ldb, 0.0f, c.data(), p.ldc);
        p.check(c, "gemm_bf16 " + p.name());
        std::vector<float> byparts = p.c0;
        std::vector<std::vector<float>> tiles;
        tiles.reserve(64);
        cpu::gemm_bf16_parts(ta, tb, d.m, d.n, d.k, 1.0f, p.a16.data(), p.lda, p.b16.data(), p.ldb, 0.0f,
                             scratch_parts(byparts, p.ldc, 0.0f, tiles));
        for (int64_t i = 0; i < d.m; ++i)
          EXPECT_EQ(0, std::memcmp(c.data() + i * p.ldc, byparts.data() + i * p.ldc, size_t(d.n) * 4))
              << "gemm_bf16_parts row " << i << " " << p.name();
      }
}

INSTANTIATE_TEST_SUITE_P(Threads, BlockedThroughGemm, ::testing::Values(1, 2));

}  // namespace

namespace {

// The default choice (GemmKernel::best): bf16 GEMMs of the FLUX linears use the blocked kernel, f32
// stays on OpenBLAS unless OpenBLAS runs SSE kernels on this AVX2 CPU (it did not know the CPU model),
// thin GEMMs (fewer than 16 rows or columns) too; a forced kernel wins.
TEST(SgemmKernelChoice, DefaultsFollowTheMeasurement) {
  const cpu::Tuning def;
  EXPECT_TRUE(cpu::gemm_uses_diffq_kernel(true, 1152, 2304, def));
  EXPECT_TRUE(cpu::gemm_uses_diffq_kernel(true, 128, 768, def));
  EXPECT_FALSE(cpu::gemm_uses_diffq_kernel(true, 1, 3072, def));
  EXPECT_EQ(cpu::gemm_uses_diffq_kernel(false, 1152, 2304, def), cpu::openblas_lacks_this_cpu());
  EXPECT_FALSE(cpu::gemm_uses_diffq_kernel(false, 1, 3072, def));
  cpu::Tuning forced;
  forced.gemm_kernel = cpu::GemmKernel::diffq;
  EXPECT_TRUE(cpu::gemm_uses_diffq_kernel(false, 1, 1, forced));
  forced.gemm_kernel = cpu::GemmKernel::openblas;
  EXPECT_FALSE(cpu::gemm_uses_diffq_kernel(true, 1152, 2304, forced));
}

}  // namespace
