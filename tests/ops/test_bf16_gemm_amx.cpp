// The bf16 GEMM on AMX-BF16 tiles for packed weights (backend/cpu/bf16_gemm_amx.h): every block of a part
// handed over once with the f32 sums of the exact product (within the f32 summation bound), over one and
// several K chunks (the partial sums' round trip), K not a multiple of 32, rows not a multiple of 32 and
// unaligned rows (X copied), parts at row / column offsets and column tails; its bf16 epilogue against
// f32_to_bf16; the packed linear through it (bias, GELU, the f32 parts) against the exact value; and the
// choice of kernel derived from the CPU, the tuning and the SIMD target. Skips naming AMX-BF16 where missing.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "backend/cpu/bf16_gemm_amx.h"
#include "backend/cpu/cpu_features.h"
#include "backend/cpu/gemm.h"
#include "backend/cpu/onednn_gemm.h"
#include "backend/cpu/simd_targets.h"
#include "backend/cpu/threads.h"
#include "backend/cpu/tuning.h"
#include "common/linear_exact_bound.h"
#include "common/random_tensor.h"
#include "diffq/dtype.h"
#include "ops/op.h"

using namespace diffq;
namespace cpu = diffq::backend::cpu;

namespace {

#define DIFFQ_REQUIRE_AMX_BF16()                                                                             \
  do {                                                                                                       \
    if (!cpu::amx_bf16_usable() || !cpu::onednn_bf16_packing_usable())                                       \
      GTEST_SKIP() << "the CPU has no usable AMX-BF16 (amx_tile, amx_bf16) with oneDNN's packed bf16 matmul"; \
  } while (0)

// A bf16 matrix [rows, cols] (row stride ld) of random values, and its f32 values.
struct Bf16Matrix {
  std::vector<uint16_t> bits;
  std::vector<float> f;
  int64_t rows = 0, cols = 0, ld = 0;
};
Bf16Matrix random_matrix(int64_t rows, int64_t cols, int64_t ld, uint32_t seed) {
  const std::vector<float> v = diffq::testing::randn({rows * ld}, seed, DType::f32).to_f32_vector();
  Bf16Matrix m{std::vector<uint16_t>(size_t(rows * ld)), std::vector<float>(size_t(rows * ld)), rows, cols, ld};
  for (size_t i = 0; i < v.size(); ++i) {
    m.bits[i] = f32_to_bf16(v[i]);
    m.f[i] = bf16_to_f32(m.bits[i]);
  }
  return m;
}

std::vector<uint16_t> packed(const Bf16Matrix& w) {
  std::vector<uint16_t> p(size_t(cpu::onednn_packed_bf16_elems(w.rows, w.cols)));
  cpu::onednn_pack_bf16_weight(w.rows, w.cols, w.bits.data(), w.ld, p.data());
  return p;
}

// Rows [r0, r1) x columns [c0, c1) of X W^T through the tiles (x `offset` elements past a 64-byte boundary):
// each output element handed over exactly once, within the f32 bound of the exact sum (rows checked: every
// `row_step`-th).
void check_part(int64_t m, int64_t n, int64_t k, int64_t ldx, int64_t offset, int64_t r0, int64_t r1, int64_t c0,
                int64_t c1, uint32_t seed, int64_t row_step = 1) {
  const Bf16Matrix x = random_matrix(m, k, ldx, seed), w = random_matrix(n, k, k, seed + 1);
  std::vector<uint16_t> buf(x.bits.size() + 64);
  const int64_t base = int64_t((64 - reinterpret_cast<uintptr_t>(buf.data()) % 64) % 64 / 2) + offset;
  uint16_t* const xs = buf.data() + base;
  std::copy(x.bits.begin(), x.bits.end(), xs);
  const std::vector<uint16_t> wp = packed(w);
  std::vector<float> c(size_t(m * n), std::numeric_limits<float>::quiet_NaN());
  std::vector<int> seen(size_t(m * n), 0);
  cpu::amx_bf16_packed_gemm_part(k, xs, ldx, wp.data(), r0, r1, c0, c1,
                                 [&](const float* blk, int64_t i0, int64_t rows, int64_t j0, int64_t cols) {
                                   ASSERT_LE(rows, 32);
                                   ASSERT_LE(cols, 32);
                                   for (int64_t i = 0; i < rows; ++i)
                                     for (int64_t j = 0; j < cols; ++j) {
                                       c[size_t((i0 + i) * n + j0 + j)] = blk[i * 32 + j];
                                       ++seen[size_t((i0 + i) * n + j0 + j)];
                                     }
                                 });
  const std::string what = "m " + std::to_string(m) + " n " + std::to_string(n) + " k " + std::to_string(k) +
                           " ldx " + std::to_string(ldx) + " offset " + std::to_string(offset) + " part [" +
                           std::to_string(r0) + ", " + std::to_string(r1) + ") x [" + std::to_string(c0) + ", " +
                           std::to_string(c1) + ")";
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      const bool inside = i >= r0 && i < r1 && j >= c0 && j < c1;
      ASSERT_EQ(seen[size_t(i * n + j)], inside ? 1 : 0) << what << " (" << i << ", " << j << ")";
      if (!inside || (i - r0) % row_step) continue;
      // (bf16_linear_output_near_exact's bound less its half bf16 ulp: f32 sums, no rounding to bf16)
      double exact = 0, mag = 0;
      for (int64_t e = 0; e < k; ++e) {
        const double t = double(x.f[size_t(i * ldx + e)]) * double(w.f[size_t(j * k + e)]);
        exact += t;
        mag += std::abs(t);
      }
      ASSERT_LE(std::abs(double(c[size_t(i * n + j)]) - exact), double(k + 1) * std::ldexp(mag, -24))
          << what << " (" << i << ", " << j << ")";
    }
}

TEST(AmxBf16, PartsMatchTheExactProduct) {
  DIFFQ_REQUIRE_AMX_BF16();
  check_part(64, 96, 64, 64, 0, 0, 64, 0, 96, 1);           // one chunk, X read in place
  check_part(70, 130, 100, 100, 0, 0, 70, 0, 130, 2);       // k and rows off the tiles' multiples: X copied
  check_part(128, 200, 7000, 7008, 0, 32, 128, 64, 190, 3);  // two K chunks, a part at row / column offsets
  check_part(300, 64, 3072, 3072, 0, 0, 300, 0, 64, 4);      // two row groups (256 + 44 rows), two chunks in one
  check_part(40, 70, 5000, 5001, 3, 0, 40, 0, 70, 5);        // unaligned rows (odd stride and start): copied
  check_part(256, 4200, 3072, 3072, 0, 0, 256, 0, 4200, 6, 17);  // two column groups of partial sums (4096 + 104)
}

// The epilogue's rounding: f32_to_bf16's bits, -0 kept without a bias, NaN canonical, column tails untouched.
TEST(AmxBf16, BlockToBf16RoundsAsF32ToBf16) {
  DIFFQ_REQUIRE_AMX_BF16();
  alignas(64) float c[32 * 32];
  const std::vector<float> v = diffq::testing::randn({32 * 32}, 9, DType::f32).to_f32_vector();
  for (int i = 0; i < 32 * 32; ++i) c[i] = v[size_t(i)] * 1000.f;
  c[0] = -0.f;
  c[1] = std::numeric_limits<float>::quiet_NaN();
  c[2] = std::numeric_limits<float>::infinity();
  c[3] = 1.00390625f;  // exactly half way between two bf16 values: to even
  std::vector<float> bias(32);
  for (int j = 0; j < 32; ++j) bias[size_t(j)] = 0.25f * float(j);
  for (const bool with_bias : {false, true})
    for (const int64_t cols : {32, 17, 16, 5}) {
      std::vector<uint16_t> y(size_t(31 * 40), 0xbeef);
      cpu::amx_bf16_block_to_bf16(c, 31, cols, with_bias ? bias.data() : nullptr, y.data(), 40);
      for (int64_t i = 0; i < 31; ++i)
        for (int64_t j = 0; j < 40; ++j) {
          const uint16_t got = y[size_t(i * 40 + j)];
          if (j >= cols) {
            ASSERT_EQ(got, 0xbeef) << "written past the block's columns: " << i << ", " << j;
            continue;
          }
          const float s = c[i * 32 + j];
          const uint16_t want = f32_to_bf16(with_bias ? s + bias[size_t(j)] : s);
          ASSERT_EQ(got, want) << "bias " << with_bias << " cols " << cols << " (" << i << ", " << j << ")";
        }
    }
}

// The packed linear through the tiles (>= 256 rows, K >= 3072): bf16 y with bias and GELU, and the f32 parts,
// against the exact value, with 1 and 2 threads (rows split, then columns split).
TEST(AmxBf16, PackedLinearThroughTheTiles) {
  DIFFQ_REQUIRE_AMX_BF16();
  if (!cpu::packed_bf16_uses_amx(256, 3072)) GTEST_SKIP() << "the tiles are not the packed linear's kernel here";
  const int64_t n = 200, k = 3104;
  const Bf16Matrix w = random_matrix(n, k, k, 20);
  const std::vector<uint16_t> wp = packed(w);
  std::vector<float> bias(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) bias[size_t(j)] = 0.01f * float(j) - 1.f;
  for (const int threads : {1, 2}) {
    cpu::set_num_threads(threads);
    for (const int64_t m : {300, 600}) {
      const Bf16Matrix x = random_matrix(m, k, k, 21 + uint32_t(m));
      std::vector<uint16_t> y(size_t(m * n));
      ASSERT_TRUE(cpu::gemm_bf16_linear_packed(m, n, k, x.bits.data(), k, wp.data(), bias.data(), y.data(), n));
      std::vector<uint16_t> yg(size_t(m * n));
      ASSERT_TRUE(cpu::gemm_bf16_linear_packed(m, n, k, x.bits.data(), k, wp.data(), bias.data(), yg.data(), n,
                                               ops::UnaryFn::gelu_tanh));
      std::vector<float> parts(size_t(m * n), std::numeric_limits<float>::quiet_NaN());
      cpu::GemmParts gp;
      gp.begin = [&](int64_t r0, int64_t, int64_t c0, int64_t, int64_t* ld) {
        *ld = n;
        return parts.data() + r0 * n + c0;
      };
      gp.end = [](int64_t, int64_t, int64_t, int64_t, const float*, int64_t) {};
      cpu::gemm_bf16_linear_packed_parts(m, n, k, x.bits.data(), k, wp.data(), bias.data(), gp, false);
      const std::string what = "threads " + std::to_string(threads) + " m " + std::to_string(m);
      for (int64_t i = 0; i < m; i += (i >= 248 && i < 320) ? 1 : 5)  // every row near the row groups' seam
        for (int64_t j = 0; j < n; ++j) {
          const float* xr = x.f.data() + i * k;
          const float* wr = w.f.data() + j * k;
          const float yv = bf16_to_f32(y[size_t(i * n + j)]);
          ASSERT_TRUE(diffq::testing::bf16_linear_output_near_exact(yv, xr, wr, k, bias[size_t(j)]))
              << what << " (" << i << ", " << j << ")";
          ASSERT_TRUE(diffq::testing::bf16_linear_output_near_exact(parts[size_t(i * n + j)], xr, wr, k,
                                                                    bias[size_t(j)]))
              << what << " f32 parts (" << i << ", " << j << ")";
          const float g = 0.5f * yv * (1.f + std::tanh(0.7978845608f * (yv + 0.044715f * yv * yv * yv)));
          ASSERT_NEAR(bf16_to_f32(yg[size_t(i * n + j)]), g, 0.01 * std::abs(g) + 1e-3)
              << what << " GELU (" << i << ", " << j << ")";
        }
    }
  }
  cpu::set_num_threads(0);
}

// The tiles run the packed linear where the CPU has AMX-BF16, oneDNN's bf16 matmul runs on AMX, the tuning's
// GEMM kernel is best and the SIMD target AVX-512, from 256 rows and K 3072.
TEST(AmxBf16, KernelChoiceFollowsTheCpu) {
  const char* forced = std::getenv("DIFFQ_GEMM_KERNEL");
  const bool best = !forced || !*forced || std::string(forced) == "best";
  const bool amx = best && cpu::amx_bf16_usable() && cpu::onednn_bf16_packing_usable() && cpu::onednn_bf16_uses_amx() &&
                   cpu::simd_target_chosen().rfind("AVX3", 0) == 0;  // not under a forced lower SIMD target
  EXPECT_EQ(cpu::packed_bf16_uses_amx(256, 3072), amx);
  EXPECT_EQ(cpu::packed_bf16_uses_amx(4096, 15360), amx);
  EXPECT_FALSE(cpu::packed_bf16_uses_amx(255, 3072));  // too few rows: oneDNN
  EXPECT_FALSE(cpu::packed_bf16_uses_amx(4096, 3071));  // too short a K: oneDNN
  cpu::Tuning t = cpu::current_tuning();
  t.gemm_kernel = cpu::GemmKernel::onednn;
  const cpu::ScopedTuning scope(t);
  EXPECT_FALSE(cpu::packed_bf16_uses_amx(4096, 4096));
}

}  // namespace
