// bf16 (and f32) GEMMs on oneDNN's matmul (backend/cpu/onednn_gemm.h), where the CPU has AVX512-BF16 or AMX-BF16 (AVX-512):
// against the f64 reference (the products of bf16 values are exact in f32, so the bound is f32
// accumulation's), for the layouts the linears and matmuls use, alpha / beta, row strides wider than
// the rows (padding untouched), parts (gemm_bf16_parts delivers the same bits), 1 and 2 threads, and the
// default dispatch (GemmKernel::best) picking it. Skips, naming the missing feature, elsewhere; the
// blocked-kernel path is tested everywhere by test_sgemm_kernel.cpp (DIFFQ_GEMM_KERNEL=diffq forces it).
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "backend/cpu/cpu_features.h"
#include "backend/cpu/gemm.h"
#include "backend/cpu/onednn_gemm.h"
#include "backend/cpu/threads.h"
#include "backend/cpu/tuning.h"
#include "common/linear_exact_bound.h"
#include "diffq/dtype.h"
#include "gemm_test_problem.h"

namespace cpu = diffq::backend::cpu;
using namespace gemm_test;

namespace {

#define DIFFQ_REQUIRE_ONEDNN_BF16()                                                                     \
  do {                                                                                                  \
    if (!cpu::onednn_bf16_available())                                                                  \
      GTEST_SKIP() << "needs AVX512-BF16 or AMX-BF16 (this CPU: avx512_bf16="                           \
                   << cpu::cpu_features().avx512_bf16 << ", amx_bf16=" << cpu::cpu_features().amx_bf16 \
                   << "): " << cpu::onednn_bf16_impl();                                                 \
  } while (0)

class OnednnGemm : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override { cpu::set_num_threads(GetParam()); }
  void TearDown() override { cpu::set_num_threads(0); }
};

// gemm_bf16 (bf16) or sgemm (f32) with oneDNN forced against the reference, and its _parts form giving
// the same bits, over the layouts, alpha / beta and edge shapes.
void expect_through_onednn(bool bf16, uint32_t seed) {
  cpu::Tuning t;
  t.gemm_kernel = cpu::GemmKernel::onednn;
  const cpu::ScopedTuning scope(t);
  for (const Dims& d : {Dims{150, 96, 300}, Dims{7, 33, 5}, Dims{64, 256, 64}, Dims{1, 40, 17}, Dims{288, 192, 96}})
    for (const bool ta : {false, true})
      for (const bool tb : {false, true})
        for (const auto& ab : {std::pair{1.0f, 0.0f}, std::pair{0.75f, 0.5f}}) {
          const float alpha = ab.first, beta = ab.second;  // plain locals: lambdas below capture them
          const Problem p(ta, tb, d, alpha, beta, seed++, /*bf16_values=*/bf16);
          auto run = [&](std::vector<float>& c) {
            if (bf16)
              cpu::gemm_bf16(ta, tb, d.m, d.n, d.k, alpha, p.a16.data(), p.lda, p.b16.data(), p.ldb, beta, c.data(), p.ldc);
            else
              cpu::sgemm(ta, tb, d.m, d.n, d.k, alpha, p.a.data(), p.lda, p.b.data(), p.ldb, beta, c.data(), p.ldc);
          };
          auto run_parts = [&](const cpu::GemmParts& parts) {
            if (bf16)
              cpu::gemm_bf16_parts(ta, tb, d.m, d.n, d.k, alpha, p.a16.data(), p.lda, p.b16.data(), p.ldb, beta, parts);
            else
              cpu::sgemm_parts(ta, tb, d.m, d.n, d.k, alpha, p.a.data(), p.lda, p.b.data(), p.ldb, beta, parts);
          };
          std::vector<float> c = p.c0;
          run(c);
          p.check(c, (bf16 ? "gemm_bf16 " : "sgemm ") + p.name());
          std::vector<float> byparts = p.c0;
          std::vector<std::vector<float>> tiles;
          tiles.reserve(64);
          run_parts(scratch_parts(byparts, p.ldc, beta, tiles));
          for (int64_t i = 0; i < d.m; ++i)
            EXPECT_EQ(0, std::memcmp(c.data() + i * p.ldc, byparts.data() + i * p.ldc, size_t(d.n) * 4))
                << "parts row " << i << " " << p.name();
        }
}

TEST_P(OnednnGemm, MatchesReferenceAndPartsGiveTheSameBits) {
  DIFFQ_REQUIRE_ONEDNN_BF16();
  expect_through_onednn(true, 900);
}

// f32 GEMMs on oneDNN (the default on AVX-512 CPUs): the same checks with f32 operands.
TEST_P(OnednnGemm, F32MatchesReferenceAndPartsGiveTheSameBits) {
  if (!cpu::cpu_features().avx512f) GTEST_SKIP() << "needs AVX-512 (oneDNN's f32 path is used only there)";
  expect_through_onednn(false, 1900);
  const Problem p(false, true, {48, 64, 96}, 1.0f, 0.0f, 5, false);
  std::vector<float> cc = p.c0;
  EXPECT_TRUE(cpu::onednn_sgemm_part(false, true, 48, 64, 96, 1.0f, p.a.data(), p.lda, p.b.data(), p.ldb, 0.0f,
                                     cc.data(), p.ldc))
      << cpu::onednn_f32_impl();
  p.check(cc, "direct f32 part " + p.name());
  const Problem q(false, true, {48, 64, 96}, 0.75f, 0.5f, 6, false);
  std::vector<float> cq = q.c0;
  EXPECT_TRUE(cpu::onednn_sgemm_part(false, true, 48, 64, 96, 0.75f, q.a.data(), q.lda, q.b.data(), q.ldb, 0.5f,
                                     cq.data(), q.ldc))
      << "f32 with alpha 0.75, beta 0.5 has no native oneDNN kernel";
  q.check(cq, "direct f32 part, alpha and beta " + q.name());
}

INSTANTIATE_TEST_SUITE_P(Threads, OnednnGemm, ::testing::Values(1, 2));

TEST(OnednnGemmChoice, F32OnOnednnOnlyWithAvx512) {
  const cpu::Tuning def;
  EXPECT_EQ(cpu::gemm_f32_uses_onednn(1152, 3072, def), cpu::cpu_features().avx512f);
  EXPECT_FALSE(cpu::gemm_f32_uses_onednn(1, 3072, def));
  cpu::Tuning blocked;
  blocked.gemm_kernel = cpu::GemmKernel::diffq;
  EXPECT_FALSE(cpu::gemm_f32_uses_onednn(1152, 3072, blocked));
  EXPECT_EQ(cpu::gemm_kernel_name(false).find("oneDNN") != std::string::npos, cpu::cpu_features().avx512f)
      << cpu::gemm_kernel_name(false);
}

// The layouts of a linear (x @ W^T: NT) and of attention-style matmuls (NN) run on oneDNN itself, not
// the blocked fallback, with padded row strides too.
TEST(OnednnGemmChoice, NativeForTheModelLayoutsAndTheDefaultForBf16) {
  DIFFQ_REQUIRE_ONEDNN_BF16();
  for (const bool tb : {true, false}) {
    const Problem p(false, tb, {48, 64, 96}, 1.0f, 0.0f, 77, true);
    std::vector<float> c = p.c0;
    EXPECT_TRUE(cpu::onednn_gemm_bf16_part(false, tb, 48, 64, 96, 1.0f, p.a16.data(), p.lda, p.b16.data(), p.ldb,
                                           0.0f, c.data(), p.ldc))  // padded strides: oneDNN's jit GEMM
        << (tb ? "NT" : "NN") << " has no native oneDNN kernel (" << cpu::onednn_bf16_impl() << ")";
    p.check(c, std::string("direct part ") + p.name());
  }
  // alpha and beta natively too (2.6: an output scale; 3.x: the weights' scale given at execute, which a
  // version could decline for bf16 and leave to the blocked fallback unnoticed).
  for (const bool tb : {true, false}) {
    const Problem p(false, tb, {48, 64, 96}, 0.75f, 0.5f, 78, true);
    std::vector<float> c = p.c0;
    EXPECT_TRUE(cpu::onednn_gemm_bf16_part(false, tb, 48, 64, 96, 0.75f, p.a16.data(), p.lda, p.b16.data(), p.ldb,
                                           0.5f, c.data(), p.ldc))
        << (tb ? "NT" : "NN") << " with alpha 0.75, beta 0.5 has no native oneDNN kernel";
    p.check(c, std::string("direct part, alpha and beta ") + p.name());
  }
  // The default sends bf16 GEMMs to oneDNN where its matmul is on AMX tiles, and on AMD CPUs where it
  // has its native AVX512-BF16 kernel (measured faster there; on Intel without AMX the pair kernel is),
  // never a GEMV, never against a forced kernel. Derived from the CPU's features and vendor.
  const cpu::Tuning def;
  const bool amx = cpu::cpu_features().amx_bf16 && cpu::amx_tiles_permitted() &&
                   cpu::onednn_bf16_impl().find("amx") != std::string::npos;
  const bool amd = cpu::cpu_features().amd && cpu::cpu_features().avx512_bf16 &&
                   cpu::onednn_bf16_impl().find("avx512_core_bf16") != std::string::npos;
  EXPECT_EQ(amx, cpu::onednn_bf16_uses_amx());
  EXPECT_EQ(cpu::onednn_bf16_preferred(), amx || amd) << cpu::onednn_bf16_impl();
  EXPECT_EQ(cpu::gemm_bf16_uses_onednn(1152, 3072, def), amx || amd);
  EXPECT_FALSE(cpu::gemm_bf16_uses_onednn(1, 3072, def));
  cpu::Tuning blocked;
  blocked.gemm_kernel = cpu::GemmKernel::diffq;
  EXPECT_FALSE(cpu::gemm_bf16_uses_onednn(1152, 3072, blocked));
  cpu::Tuning forced;
  forced.gemm_kernel = cpu::GemmKernel::onednn;
  EXPECT_TRUE(cpu::gemm_bf16_uses_onednn(1152, 3072, forced));
  EXPECT_EQ(cpu::gemm_kernel_name(true).find("oneDNN") != std::string::npos, amx || amd)
      << cpu::gemm_kernel_name(true);
}

// The bf16 linear written straight to bf16 by oneDNN (bias and the one rounding inside its primitive):
// the bits of the f32 C path (C = bias, + x w^T on oneDNN, rounded once), with and without bias, padded
// strides, one and two threads; false with nothing written where the bf16 kernel is not oneDNN. On AMX
// with a bias the two sum in different orders (the f32 path's brgemm starts its K blocks from C = bias,
// the fused one adds the bias after the last block; measured up to 4 bf16 ulps apart where the bias
// cancels the product), so there each output is checked against the exact f64 value instead: within
// half a bf16 ulp (the one rounding) plus the f32 summation bound (k + 1) 2^-24 (sum |x w| + |bias|).
void expect_bf16_linear_near_exact(const gemm_test::Problem& p, const std::vector<float>& bias,
                                   const std::vector<uint16_t>& got, int64_t ldy, const std::string& what) {
  const int64_t m = p.d.m, n = p.d.n, k = p.d.k;
  std::vector<float> x(static_cast<size_t>(k)), w(static_cast<size_t>(k));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t e = 0; e < k; ++e) {
        x[size_t(e)] = diffq::bf16_to_f32(p.a16[size_t(i * p.lda + e)]);
        w[size_t(e)] = diffq::bf16_to_f32(p.b16[size_t(j * p.ldb + e)]);
      }
      ASSERT_TRUE(diffq::testing::bf16_linear_output_near_exact(diffq::bf16_to_f32(got[size_t(i * ldy + j)]), x.data(),
                                                                w.data(), k, bias.empty() ? 0.0 : bias[size_t(j)]))
          << what << " (" << i << ", " << j << ")";
    }
}

TEST(OnednnGemm, LinearToBf16MatchesTheF32Path) {
  DIFFQ_REQUIRE_ONEDNN_BF16();
  cpu::Tuning on = cpu::current_tuning(), off = cpu::current_tuning();
  on.gemm_kernel = cpu::GemmKernel::onednn;
  off.gemm_kernel = cpu::GemmKernel::diffq;
  uint32_t seed = 900;
  for (const int threads : {1, 2}) {
    cpu::set_num_threads(threads);
    for (const Dims& d : {Dims{48, 64, 96}, Dims{150, 96, 300}, Dims{33, 17, 40}, Dims{300, 200, 129}})
      for (const bool with_bias : {false, true}) {
        const Problem p(false, true, d, 1.0f, 0.0f, seed++, true);
        std::vector<float> bias(size_t(d.n));
        for (int64_t j = 0; j < d.n; ++j) bias[size_t(j)] = float(j % 7) * 0.375f - 1.0f;
        const int64_t ldy = d.n + 2;
        std::vector<uint16_t> want(size_t(d.m * ldy), 0xFFFF), got = want;
        {
          const cpu::ScopedTuning scope(on);
          std::vector<float> c(size_t(d.m * d.n));
          for (int64_t i = 0; i < d.m; ++i)
            for (int64_t j = 0; j < d.n; ++j) c[size_t(i * d.n + j)] = with_bias ? bias[size_t(j)] : 0.f;
          cpu::gemm_bf16(false, true, d.m, d.n, d.k, 1.0f, p.a16.data(), p.lda, p.b16.data(), p.ldb,
                         with_bias ? 1.0f : 0.0f, c.data(), d.n);
          for (int64_t i = 0; i < d.m; ++i)
            for (int64_t j = 0; j < d.n; ++j) want[size_t(i * ldy + j)] = diffq::f32_to_bf16(c[size_t(i * d.n + j)]);
          ASSERT_TRUE(cpu::gemm_bf16_linear_to_bf16(d.m, d.n, d.k, p.a16.data(), p.lda, p.b16.data(), p.ldb,
                                                    with_bias ? bias.data() : nullptr, got.data(), ldy));
        }
        const std::string what = "threads " + std::to_string(threads) + " " + p.name() + (with_bias ? " + bias" : "");
        if (with_bias && cpu::onednn_bf16_uses_amx())
          expect_bf16_linear_near_exact(p, bias, got, ldy, what);
        else
          EXPECT_EQ(got, want) << what;
        const cpu::ScopedTuning scope(off);
        std::vector<uint16_t> untouched(size_t(d.m * ldy), 0xFFFF);
        EXPECT_FALSE(cpu::gemm_bf16_linear_to_bf16(d.m, d.n, d.k, p.a16.data(), p.lda, p.b16.data(), p.ldb,
                                                   bias.data(), untouched.data(), ldy));
        EXPECT_EQ(untouched, std::vector<uint16_t>(size_t(d.m * ldy), 0xFFFF));
      }
  }
  cpu::set_num_threads(0);
}

}  // namespace
