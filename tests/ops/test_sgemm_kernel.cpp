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

namespace cpu = diffq::backend::cpu;

namespace {

struct Dims {
  int64_t m, n, k;
};

uint16_t bf16_bits(float f) {  // round to nearest even (finite inputs)
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
float from_bf16(uint16_t h) {
  const uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Operands of C[m, n] = alpha * op(A) @ op(B) + beta * C with padded row strides, f32 and bf16 forms
// (the f32 form holds the bf16 values when `bf16_values`).
struct Problem {
  bool ta, tb;
  Dims d;
  float alpha, beta;
  int64_t lda, ldb, ldc;
  std::vector<float> a, b, c0;
  std::vector<uint16_t> a16, b16;

  Problem(bool ta_, bool tb_, Dims d_, float alpha_, float beta_, uint32_t seed, bool bf16_values = false)
      : ta(ta_), tb(tb_), d(d_), alpha(alpha_), beta(beta_) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    const int64_t a_rows = ta ? d.k : d.m, a_cols = ta ? d.m : d.k;
    const int64_t b_rows = tb ? d.n : d.k, b_cols = tb ? d.k : d.n;
    lda = a_cols + 3;
    ldb = b_cols + 2;
    ldc = d.n + 5;
    auto fill = [&](std::vector<float>& v, std::vector<uint16_t>& h, int64_t rows, int64_t ld) {
      v.assign(size_t(std::max<int64_t>(rows, 1) * ld), 0.f);
      h.assign(v.size(), 0);
      for (size_t i = 0; i < v.size(); ++i) {
        h[i] = bf16_bits(u(rng));
        v[i] = bf16_values ? from_bf16(h[i]) : u(rng);
      }
    };
    fill(a, a16, a_rows, lda);
    fill(b, b16, b_rows, ldb);
    c0.assign(size_t(d.m * ldc), 0.f);
    for (auto& x : c0) x = beta == 0.f ? std::numeric_limits<float>::quiet_NaN() : u(rng);
  }

  float av(int64_t i, int64_t p) const { return ta ? a[size_t(p * lda + i)] : a[size_t(i * lda + p)]; }
  float bv(int64_t p, int64_t j) const { return tb ? b[size_t(j * ldb + p)] : b[size_t(p * ldb + j)]; }

  // Checks `c` against the reference: within a few f32 roundings per term of the products' magnitudes,
  // and the padding columns (ldc > n) untouched.
  void check(const std::vector<float>& c, const std::string& what) const {
    std::vector<float> ref = c0;
    cpu::sgemm_reference(ta, tb, d.m, d.n, d.k, alpha, a.data(), lda, b.data(), ldb, beta, ref.data(), ldc);
    int bad = 0;
    for (int64_t i = 0; i < d.m && bad < 5; ++i) {
      for (int64_t j = 0; j < d.n; ++j) {
        double mag = 0;
        for (int64_t p = 0; p < d.k; ++p) mag += std::fabs(double(av(i, p)) * bv(p, j));
        const double cin = beta == 0.f ? 0.0 : std::fabs(double(beta) * c0[size_t(i * ldc + j)]);
        const double tol = double(d.k + 4) * std::ldexp(1.0, -23) * (std::fabs(alpha) * mag + cin) + 1e-30;
        const float got = c[size_t(i * ldc + j)], want = ref[size_t(i * ldc + j)];
        if (!(std::fabs(double(got) - want) <= tol)) {
          ADD_FAILURE() << what << " at (" << i << ", " << j << "): " << got << " vs " << want << " (tol " << tol << ")";
          if (++bad >= 5) break;
        }
      }
      for (int64_t j = d.n; j < ldc; ++j) {
        const float got = c[size_t(i * ldc + j)], was = c0[size_t(i * ldc + j)];
        if (std::memcmp(&got, &was, 4) != 0) {
          ADD_FAILURE() << what << ": padding (" << i << ", " << j << ") written";
          ++bad;
          break;
        }
      }
    }
  }

  std::string name() const {
    return std::string(ta ? "T" : "N") + (tb ? "T" : "N") + " m=" + std::to_string(d.m) + " n=" +
           std::to_string(d.n) + " k=" + std::to_string(d.k) + " alpha=" + std::to_string(alpha) +
           " beta=" + std::to_string(beta);
  }
};

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

// C computed part by part into a separate scratch tile per part (as compile's epilogue fusion may).
cpu::GemmParts scratch_parts(std::vector<float>& c, int64_t ldc, float beta, std::vector<std::vector<float>>& tiles) {
  cpu::GemmParts parts;
  parts.begin = [&c, ldc, beta, &tiles](int64_t r0, int64_t r1, int64_t c0, int64_t c1, int64_t* ld) {
    static std::mutex mu;
    std::lock_guard<std::mutex> lock(mu);
    tiles.emplace_back(size_t((r1 - r0) * (c1 - c0 + 1)));
    std::vector<float>& t = tiles.back();
    *ld = c1 - c0 + 1;
    for (int64_t i = r0; i < r1; ++i)
      for (int64_t j = c0; j < c1; ++j) t[size_t((i - r0) * *ld + j - c0)] = beta == 0.f ? 0.f : c[size_t(i * ldc + j)];
    return t.data();
  };
  parts.end = [&c, ldc](int64_t r0, int64_t r1, int64_t c0, int64_t c1, const float* p, int64_t ld) {
    for (int64_t i = r0; i < r1; ++i)
      for (int64_t j = c0; j < c1; ++j) c[size_t(i * ldc + j)] = p[(i - r0) * ld + j - c0];
  };
  return parts;
}

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
// stays on OpenBLAS, thin bf16 GEMMs (fewer than 16 rows or columns) too; a forced kernel wins.
TEST(SgemmKernelChoice, DefaultsFollowTheMeasurement) {
  const cpu::Tuning def;
  EXPECT_TRUE(cpu::gemm_uses_diffq_kernel(true, 1152, 2304, def));
  EXPECT_TRUE(cpu::gemm_uses_diffq_kernel(true, 128, 768, def));
  EXPECT_FALSE(cpu::gemm_uses_diffq_kernel(true, 1, 3072, def));
  EXPECT_FALSE(cpu::gemm_uses_diffq_kernel(false, 1152, 2304, def));
  cpu::Tuning forced;
  forced.gemm_kernel = cpu::GemmKernel::diffq;
  EXPECT_TRUE(cpu::gemm_uses_diffq_kernel(false, 1, 1, forced));
  forced.gemm_kernel = cpu::GemmKernel::openblas;
  EXPECT_FALSE(cpu::gemm_uses_diffq_kernel(true, 1152, 2304, forced));
}

}  // namespace
