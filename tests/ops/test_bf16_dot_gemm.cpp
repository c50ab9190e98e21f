// diffq's bf16-pair GEMM (backend/cpu/bf16_dot_gemm.h, vdpbf16ps) against the f64 reference
// (sgemm_reference; products of bf16 values are exact in f32, so the bound is f32 accumulation's): edge
// tiles (m, n of 1..100 around the 8 x 32 tile, odd and even k around the pairs and K blocks), all four
// transpose combinations, row strides wider than the rows (padding untouched), alpha / beta (beta = 0
// ignores NaN in C), k = 0; through gemm_bf16 / gemm_bf16_parts on 1 and 2 threads (same bits, repeat
// identical); and the dispatch: the default runs it where the CPU has AVX512-BF16, and DIFFQ_SIMD_TARGET /
// DIFFQ_GEMM_KERNEL=diffq-widen turn it off. Skips, naming the missing feature, elsewhere (the widening
// kernel is tested everywhere by test_sgemm_kernel.cpp).
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "backend/cpu/bf16_dot_gemm.h"
#include "backend/cpu/cpu_features.h"
#include "backend/cpu/gemm.h"
#include "backend/cpu/onednn_gemm.h"
#include "backend/cpu/simd_targets.h"
#include "backend/cpu/threads.h"
#include "backend/cpu/tuning.h"
#include "gemm_test_problem.h"

namespace cpu = diffq::backend::cpu;
using namespace gemm_test;

namespace {

#define DIFFQ_REQUIRE_BF16_DOT()                                                                         \
  do {                                                                                                   \
    if (!cpu::bf16_dot_gemm_usable())                                                                    \
      GTEST_SKIP() << "needs AVX512-BF16 with AVX-512 F/BW/VL and an AVX3 dispatch target (this CPU: "   \
                   << "avx512_bf16=" << cpu::cpu_features().avx512_bf16 << ", avx512f="                 \
                   << cpu::cpu_features().avx512f << "; dispatch " << cpu::simd_target_chosen() << ")"; \
  } while (0)

TEST(Bf16DotGemm, MatchesReferenceAtEdges) {
  DIFFQ_REQUIRE_BF16_DOT();
  uint32_t seed = 1;
  std::vector<Dims> dims;
  for (const int64_t m : {1, 5, 7, 8, 9, 17, 33, 100})
    for (const int64_t n : {1, 17, 31, 32, 33, 100})
      for (const int64_t k : {1, 2, 7, 33, 64}) dims.push_back({m, n, k});
  // Several K blocks (600 -> 3 x 200, 1031 -> 5 blocks of odd depth 207 / 203), more than one M block
  // (150 > 144 rows), several N blocks (3100 > 6 x 512 columns).
  for (const Dims d : {Dims{150, 40, 600}, Dims{13, 70, 1031}, Dims{7, 3100, 3}, Dims{145, 65, 257}}) dims.push_back(d);
  for (const Dims& d : dims)
    for (const bool ta : {false, true})
      for (const bool tb : {false, true}) {
        const float alpha = (seed % 3 == 0) ? -0.75f : 1.0f;
        const float beta = (seed % 2 == 0) ? 0.0f : 0.5f;
        const Problem p(ta, tb, d, alpha, beta, seed++, /*bf16_values=*/true);
        std::vector<float> c = p.c0;
        cpu::gemm_bf16_dot(ta, tb, d.m, d.n, d.k, alpha, p.a16.data(), p.lda, p.b16.data(), p.ldb, beta, c.data(),
                           p.ldc);
        p.check(c, "bf16 dot " + p.name());
        if (::testing::Test::HasFailure()) return;
      }
}

TEST(Bf16DotGemm, ZeroDepthScalesC) {
  DIFFQ_REQUIRE_BF16_DOT();
  for (const float beta : {0.0f, 0.5f}) {
    const Problem p(false, true, Dims{7, 17, 0}, 1.0f, beta, 7, true);
    std::vector<float> c = p.c0;
    cpu::gemm_bf16_dot(false, true, 7, 17, 0, 1.0f, p.a16.data(), p.lda, p.b16.data(), p.ldb, beta, c.data(), p.ldc);
    for (int64_t i = 0; i < 7; ++i)
      for (int64_t j = 0; j < 17; ++j)
        EXPECT_EQ(c[size_t(i * p.ldc + j)], beta == 0.0f ? 0.0f : beta * p.c0[size_t(i * p.ldc + j)]);
  }
}

// Inf and NaN in the operands reach C as in an f32 GEMM (no pair hides them).
TEST(Bf16DotGemm, PropagatesInfAndNaN) {
  DIFFQ_REQUIRE_BF16_DOT();
  const Problem base(false, true, Dims{6, 32, 8}, 1.0f, 0.0f, 3, true);
  Problem p = base;
  p.a16[size_t(2 * p.lda + 5)] = 0x7f80;  // +inf at A[2, 5] (the odd half of a pair)
  p.b16[size_t(9 * p.ldb + 0)] = 0x7fc0;  // NaN at op(B)[0, 9] (the even half)
  std::vector<float> c = p.c0;
  cpu::gemm_bf16_dot(false, true, 6, 32, 8, 1.0f, p.a16.data(), p.lda, p.b16.data(), p.ldb, 0.0f, c.data(), p.ldc);
  for (int64_t i = 0; i < 6; ++i)
    for (int64_t j = 0; j < 32; ++j) {
      const float x = c[size_t(i * p.ldc + j)];
      if (j == 9)
        EXPECT_TRUE(std::isnan(x)) << i << "," << j;
      else if (i == 2)
        EXPECT_TRUE(std::isinf(x) || std::isnan(x)) << i << "," << j << " " << x;  // inf * b (b may be < 0)
      else
        EXPECT_TRUE(std::isfinite(x)) << i << "," << j;
    }
}

// B given by row pointers (the implicit convolution's B): rows of a random [k + 3, n + 40] matrix taken
// in a shuffled order at a column offset, against the reference on the gathered matrix; the dot kernel
// directly, and gemm_bf16_rows by default and with the widening kernel forced (its gathering fallback).
TEST(Bf16DotGemm, RowPointerOperandMatchesReference) {
  uint32_t seed = 40;
  for (const Dims& d : {Dims{8, 32, 64}, Dims{13, 70, 33}, Dims{150, 600, 300}, Dims{1, 5, 7}, Dims{40, 96, 1031}})
    for (const bool ta : {false, true}) {
      const Problem p(ta, false, d, 0.75f, seed % 2 ? 0.5f : 0.0f, seed, /*bf16_values=*/true);
      ++seed;
      const int64_t ld = d.n + 40, col0 = 17;
      std::vector<uint16_t> store(size_t((d.k + 3) * ld));
      std::vector<const uint16_t*> rows(size_t(d.k));
      for (int64_t kk = 0; kk < d.k; ++kk) {  // row kk of op(B) lives at store row (kk * 7) % (k + 3)
        const int64_t at = (kk * 7) % (d.k + 3);
        rows[size_t(kk)] = store.data() + at * ld;
        for (int64_t j = 0; j < d.n; ++j) store[size_t(at * ld + col0 + j)] = p.b16[size_t(kk * p.ldb + j)];
      }
      auto check = [&](const std::string& what, auto&& run) {
        std::vector<float> c = p.c0;
        run(c);
        p.check(c, what + " " + p.name());
      };
      if (cpu::bf16_dot_gemm_usable())
        check("dot rows", [&](std::vector<float>& c) {
          cpu::gemm_bf16_dot_rows(ta, d.m, d.n, d.k, p.alpha, p.a16.data(), p.lda, rows.data(), col0, p.beta,
                                  c.data(), p.ldc);
        });
      for (const cpu::GemmKernel k : {cpu::GemmKernel::best, cpu::GemmKernel::diffq_widen}) {
        cpu::Tuning t;
        t.gemm_kernel = k;
        const cpu::ScopedTuning scope(t);
        check("gemm_bf16_rows kernel " + std::to_string(int(k)), [&](std::vector<float>& c) {
          cpu::gemm_bf16_rows(ta, d.m, d.n, d.k, p.alpha, p.a16.data(), p.lda, rows.data(), col0, p.beta, c.data(),
                              p.ldc);
        });
      }
      if (::testing::Test::HasFailure()) return;
    }
}

class Bf16DotThroughGemm : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override { cpu::set_num_threads(GetParam()); }
  void TearDown() override { cpu::set_num_threads(0); }
};

// The default dispatch on this CPU: gemm_bf16 and its parts form through the pair kernel (checked by
// the dispatch query), the same bits by parts and on repeat, for linear (NT), matmul (NN) and thin shapes.
TEST_P(Bf16DotThroughGemm, DefaultDispatchMatchesReferenceAndParts) {
  DIFFQ_REQUIRE_BF16_DOT();
  // The default (the pair kernel, or oneDNN where it is preferred: AMX, AMD) and the pair kernel forced.
  for (const cpu::GemmKernel kernel : {cpu::GemmKernel::best, cpu::GemmKernel::diffq}) {
  cpu::Tuning def = cpu::current_tuning();
  def.gemm_kernel = kernel;
  const cpu::ScopedTuning scope(def);
  if (kernel == cpu::GemmKernel::diffq) {
    EXPECT_TRUE(cpu::gemm_bf16_uses_dot(150, 96, def));
  }
  uint32_t seed = 700;
  for (const Dims& d : {Dims{150, 96, 300}, Dims{1, 3072 / 8, 768}, Dims{200, 3, 64}, Dims{64, 256, 63}})
    for (const bool ta : {false, true})
      for (const bool tb : {false, true})
        for (const auto& [alpha, beta] : {std::pair{1.0f, 0.0f}, std::pair{0.75f, 0.5f}}) {
          ASSERT_TRUE(cpu::gemm_bf16_uses_dot(d.m, d.n, def) || cpu::gemm_bf16_uses_onednn(d.m, d.n, def));
          const Problem p(ta, tb, d, alpha, beta, seed++, /*bf16_values=*/true);
          std::vector<float> c = p.c0;
          cpu::gemm_bf16(ta, tb, d.m, d.n, d.k, alpha, p.a16.data(), p.lda, p.b16.data(), p.ldb, beta, c.data(), p.ldc);
          p.check(c, "gemm_bf16 " + p.name());
          std::vector<float> again = p.c0;
          cpu::gemm_bf16(ta, tb, d.m, d.n, d.k, alpha, p.a16.data(), p.lda, p.b16.data(), p.ldb, beta, again.data(),
                         p.ldc);
          EXPECT_EQ(0, std::memcmp(c.data(), again.data(), c.size() * 4)) << "repeat " << p.name();
          std::vector<float> byparts = p.c0;
          std::vector<std::vector<float>> tiles;
          tiles.reserve(64);
          cpu::gemm_bf16_parts(ta, tb, d.m, d.n, d.k, alpha, p.a16.data(), p.lda, p.b16.data(), p.ldb, beta,
                               scratch_parts(byparts, p.ldc, beta, tiles));
          for (int64_t i = 0; i < d.m; ++i)
            EXPECT_EQ(0, std::memcmp(c.data() + i * p.ldc, byparts.data() + i * p.ldc, size_t(d.n) * 4))
                << "parts row " << i << " " << p.name();
        }
  }
}

INSTANTIATE_TEST_SUITE_P(Threads, Bf16DotThroughGemm, ::testing::Values(1, 2));

// Which bf16 kernel runs: oneDNN's AMX matmul first where oneDNN has AMX bf16 tiles, else the pair kernel
// where usable (every shape);
// a lower SIMD target or diffq-widen / openblas / onednn turn it off.
TEST(Bf16DotChoice, DefaultWhereUsableAndLowerPathsForceable) {
  const cpu::Tuning def;
  const bool usable = cpu::bf16_dot_gemm_usable();
  EXPECT_EQ(usable, cpu::cpu_features().avx512_bf16 && cpu::simd_target_chosen().rfind("AVX3", 0) == 0);
  EXPECT_EQ(cpu::gemm_bf16_uses_dot(1152, 3072, def), usable && !cpu::gemm_bf16_uses_onednn(1152, 3072, def));
  EXPECT_EQ(cpu::gemm_bf16_uses_dot(1, 18432, def), usable);
  // Native bf16 (what convolutions and quantized tiles ask): the pair kernel or oneDNN.
  EXPECT_EQ(cpu::gemm_bf16_native(1152, 3072, def),
            cpu::gemm_bf16_uses_dot(1152, 3072, def) || cpu::gemm_bf16_uses_onednn(1152, 3072, def));
  EXPECT_EQ(cpu::gemm_bf16_native(1152, 3072, def), usable || cpu::onednn_bf16_preferred());
  for (const cpu::GemmKernel k : {cpu::GemmKernel::diffq_widen, cpu::GemmKernel::openblas, cpu::GemmKernel::onednn}) {
    cpu::Tuning t;
    t.gemm_kernel = k;
    EXPECT_FALSE(cpu::gemm_bf16_uses_dot(1152, 3072, t)) << int(k);
  }
  if (!usable) GTEST_SKIP() << "needs AVX512-BF16 for the rest (avx512_bf16=" << cpu::cpu_features().avx512_bf16 << ")";
  // The name `diffq info` prints is the kernel the dispatch runs at 1024x1024: oneDNN's where it has AMX
  // tiles for bf16 (Sapphire Rapids and later) or the CPU is an AMD one (Zen 4 / Zen 5: measured faster
  // there), else the pair kernel. Derived from the CPU's features and vendor, so the test holds on AMX,
  // AVX512-BF16-only (Intel, AMD) and forced-lower CPUs alike.
  const bool onednn_first = cpu::onednn_bf16_uses_amx() ||
                            (cpu::cpu_features().amd && cpu::onednn_bf16_impl().find("avx512_core_bf16") != std::string::npos);
  const char* expected_kernel = onednn_first ? "oneDNN" : "vdpbf16ps";
  EXPECT_EQ(cpu::gemm_bf16_uses_onednn(1024, 1024, def), onednn_first);
  EXPECT_NE(cpu::gemm_kernel_name(true).find(expected_kernel), std::string::npos)
      << "expected " << expected_kernel << " (onednn_bf16_uses_amx=" << cpu::onednn_bf16_uses_amx()
      << ", amd=" << cpu::cpu_features().amd << "), got " << cpu::gemm_kernel_name(true);
  cpu::force_simd_target("AVX2");
  EXPECT_FALSE(cpu::bf16_dot_gemm_usable());
  EXPECT_FALSE(cpu::gemm_bf16_uses_dot(1152, 3072, def));
  cpu::force_simd_target("");
  EXPECT_TRUE(cpu::bf16_dot_gemm_usable());
}

}  // namespace
