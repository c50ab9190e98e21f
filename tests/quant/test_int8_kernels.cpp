// The int8 dynamic linear's kernels against their scalar references, bit for bit: the AMX-INT8 tiles'
// B layout and part products (int8_gemm_amx.h), the packed-A GEMM
// at tile / block edges (m, n, k not multiples of 6 / 16 / the 512-deep block, odd k, m = 1, the row
// split when columns run short), the packed A layout, the fused scale / bias / cast epilogue against
// int32 C + the reference epilogue, the activation min / max and quantization rows, and the whole
// torchao int8dq linear against the unfused composition (scalar quantization, scalar GEMM, scalar
// epilogue) for f32 / bf16 / f16 inputs, per-token and per-tensor scales, with and without bias.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdlib>
#include <string>
#include <cstring>
#include <random>
#include <tuple>
#include <vector>

#include "backend/cpu/int8_act_quant.h"
#include "backend/cpu/int8_gemm.h"
#include "backend/cpu/int8_gemm_amx.h"
#include "backend/cpu/quant/int8_dynamic_linear.h"
#include "backend/cpu/simd_targets.h"
#include "backend/cpu/onednn_gemm.h"
#include "backend/cpu/threads.h"
#include "backend/cpu/tuning.h"
#include "core/random.h"
#include "ops/ops.h"
#include "quant/torchao/affine.h"
#include "quant/torchao/affine_int8_weight.h"

namespace {

using namespace diffq;
namespace cpu = diffq::backend::cpu;
namespace tao = diffq::quant::torchao;

std::vector<int8_t> random_s8(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dist(-128, 127);
  std::vector<int8_t> v(n);
  for (auto& x : v) x = int8_t(dist(rng));
  return v;
}

struct ThreadsGuard {
  explicit ThreadsGuard(int n) { cpu::set_num_threads(n); }
  ~ThreadsGuard() { cpu::set_num_threads(0); }
};

// Which kernel runs: oneDNN's where the CPU has AVX512-VNNI or AMX-INT8 (measured faster; exact either
// way), the vpmaddwd tile elsewhere or when DIFFQ_GEMM_KERNEL=diffq (ctest runs this suite both ways:
// the names ending @int8-tile).
// The AMX-INT8 tiles take the products of int8 rows from 256 rows where the CPU has AMX-INT8 and oneDNN's
// int8 matmul runs on AMX (DNNL_MAX_CPU_ISA below AMX turns them off; DIFFQ_GEMM_KERNEL other than best and
// DIFFQ_SIMD_TARGET below AVX-512 too).
TEST(Int8Kernels, KernelChoiceFollowsTheCpu) {
  const char* forced = std::getenv("DIFFQ_GEMM_KERNEL");
  const std::string name = cpu::int8_gemm_kernel_name();
  const bool best = !forced || !*forced || std::string(forced) == "best";
  if (forced && std::string(forced) == "diffq") {
    EXPECT_FALSE(cpu::int8_uses_onednn());
    EXPECT_NE(name.find("madd tile"), std::string::npos) << name;
  } else {
    EXPECT_EQ(cpu::int8_uses_onednn(), cpu::onednn_int8_available()) << name;
    EXPECT_NE(name.find(cpu::int8_uses_onednn() ? "oneDNN" : "madd tile"), std::string::npos) << name;
  }
  const bool amx = best && cpu::amx_int8_usable() && cpu::onednn_int8_available() &&
                   cpu::onednn_int8_impl().find("amx") != std::string::npos &&
                   cpu::simd_target_chosen().rfind("AVX3", 0) == 0;  // not under a forced lower SIMD target
  EXPECT_EQ(cpu::int8_uses_amx(), amx) << name;
  EXPECT_EQ(name.find("AMX-INT8 tiles") != std::string::npos, amx) << name;
  EXPECT_EQ(cpu::int8_rows_use_amx(256, 32, 1), amx);
  EXPECT_FALSE(cpu::int8_rows_use_amx(255, 4096, 4096));  // too few rows: oneDNN / the tile
  EXPECT_FALSE(cpu::int8_rows_use_amx(4096, 31, 4096));
}

// The tiles' B layout (4 consecutive k of a column side by side, 16 columns a tile, two tiles a step of 64)
// against its scalar reference: k not a multiple of 4 or 64, fewer than 32 (or 16) live columns, a row
// stride longer than k.
TEST(Int8Amx, PackedBMatchesReference) {
  if (!cpu::amx_int8_usable()) GTEST_SKIP() << "the CPU has no usable AMX-INT8 (amx_tile, amx_int8)";
  for (int64_t k : {1, 3, 4, 63, 64, 65, 130, 1030})
    for (int64_t cols : {1, 15, 16, 17, 31, 32}) {
      const int64_t ldw = k + 5, j0 = 3;
      const auto w = random_s8(size_t((j0 + 32) * ldw), uint32_t(k * 40 + cols));
      const size_t bytes = size_t(cpu::amx_int8_lda(k) / 64 * 2048);
      std::vector<int8_t> got(bytes, 99), want(bytes, 77);
      cpu::amx_int8_pack_b_block(k, w.data(), ldw, j0, cols, got.data());
      cpu::amx_int8_pack_b_block_reference(k, w.data(), ldw, j0, cols, want.data());
      ASSERT_EQ(got, want) << "k=" << k << " cols=" << cols;
    }
}

// The tiles' product of a part (rows from a multiple of 32, columns from anywhere) against the reference,
// int32 exact: every block handed over once, inside the part, with the part's edges (rows and columns
// not multiples of 32 or 16, k not of 64), extreme values (-128 x -128 summed over k), A in the tiles' form.
TEST(Int8Amx, PartProductsMatchReference) {
  if (!cpu::amx_int8_usable()) GTEST_SKIP() << "the CPU has no usable AMX-INT8 (amx_tile, amx_int8)";
  for (int fill : {0, 1})
    for (const auto& shape : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1}, {33, 17, 3}, {64, 32, 64},
                              {100, 45, 65}, {70, 130, 1030}, {40, 300, 200}}) {
      // Plain locals, not structured bindings: the lambda below captures them (clang 14 refuses bindings).
      const int64_t m = std::get<0>(shape), n = std::get<1>(shape), k = std::get<2>(shape);
      const int64_t ldw = k + 2;
      auto a = random_s8(size_t(m * k), uint32_t(m + 3 * n + 7 * k));
      auto w = random_s8(size_t(n * ldw), uint32_t(5 * m + n + k));
      if (fill) std::fill(a.begin(), a.end(), int8_t(-128)), std::fill(w.begin(), w.end(), int8_t(-128));
      std::vector<int32_t> ref(size_t(m * n));
      cpu::gemm_s8s8s32_reference(m, n, k, a.data(), k, w.data(), ldw, ref.data(), n);
      const int64_t lda = cpu::amx_int8_lda(k);
      std::vector<int8_t> padded(size_t(cpu::amx_int8_rows(m) * lda + 64));
      int8_t* ap = padded.data() + (64 - reinterpret_cast<uintptr_t>(padded.data()) % 64) % 64;
      cpu::amx_int8_copy_rows(m, k, a.data(), k, ap);
      // Parts: the whole product, and a split at row 32 / column 16 (the threads' shares' boundaries).
      for (const auto& origin : {std::pair<int64_t, int64_t>{0, 0}, {32, 16}}) {
        const int64_t r0 = origin.first, c0 = origin.second;
        if (r0 >= m || c0 >= n) continue;
        std::vector<int32_t> got(size_t(m * n), -7);
        std::vector<int> seen(size_t(m * n), 0);
        cpu::amx_int8_gemm_part(k, ap, lda, w.data(), ldw, r0, m, c0, n,
                                [&](const int32_t* c, int64_t i0, int64_t rows, int64_t j0, int64_t cols) {
                                  ASSERT_TRUE(i0 >= r0 && i0 + rows <= m && j0 >= c0 && j0 + cols <= n);
                                  ASSERT_TRUE(rows >= 1 && rows <= 32 && cols >= 1 && cols <= 32);
                                  for (int64_t i = 0; i < rows; ++i)
                                    for (int64_t j = 0; j < cols; ++j) {
                                      got[size_t((i0 + i) * n + j0 + j)] = c[i * 32 + j];
                                      ++seen[size_t((i0 + i) * n + j0 + j)];
                                    }
                                });
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) {
            const bool inside = i >= r0 && j >= c0;
            ASSERT_EQ(seen[size_t(i * n + j)], inside ? 1 : 0) << i << "," << j;
            if (inside)
              ASSERT_EQ(got[size_t(i * n + j)], ref[size_t(i * n + j)])
                  << "m=" << m << " n=" << n << " k=" << k << " fill=" << fill << " at " << i << "," << j;
          }
      }
    }
}

TEST(Int8Kernels, PackedALayout) {
  for (auto [m, k] : {std::pair<int64_t, int64_t>{1, 1}, {7, 5}, {13, 34}}) {
    const auto a = random_s8(size_t(m * (k + 2)), uint32_t(m + k));
    std::vector<int16_t> p(cpu::int8_packed_a_elems(m, k), 99);
    cpu::pack_a_s8(m, k, a.data(), k + 2, p.data());
    const int64_t pairs = (k + 1) / 2;
    for (int64_t s = 0; s < (m + 5) / 6; ++s)
      for (int64_t q = 0; q < pairs; ++q)
        for (int64_t r = 0; r < 6; ++r)
          for (int64_t h = 0; h < 2; ++h) {
            const int64_t i = 6 * s + r, c = 2 * q + h;
            const int16_t want = (i < m && c < k) ? a[size_t(i * (k + 2) + c)] : 0;
            ASSERT_EQ(p[size_t(s * pairs * 12 + q * 12 + r * 2 + h)], want) << m << "x" << k << " " << i << "," << c;
          }
  }
}

TEST(Int8Kernels, PackedGemmMatchesReferenceAtEdges) {
  for (int threads : {1, 2}) {
    ThreadsGuard tg(threads);
    for (int64_t m : {1, 6, 7, 37, 300})  // 300: more rows than one oneDNN call takes (258)
      for (int64_t n : {1, 16, 17, 40, 257, 300})
        for (int64_t k : {1, 2, 15, 16, 33, 512, 513, 1030}) {
          if (m * n * k > 4'000'000) continue;
          const auto a = random_s8(size_t(m * k), uint32_t(m * 7 + n * 3 + k));
          const auto b = random_s8(size_t(n * (k + 1)), uint32_t(m + n * 5 + k * 11));
          std::vector<int16_t> ap(cpu::int8_packed_a_elems(m, k));
          cpu::pack_a_s8(m, k, a.data(), k, ap.data());
          std::vector<int32_t> c(size_t(m * (n + 1)), -7), ref(size_t(m * (n + 1)), -7);
          cpu::gemm_s8s8_packed(m, n, k, ap.data(), b.data(), k + 1, c.data(), n + 1, nullptr);
          cpu::gemm_s8s8s32_reference(m, n, k, a.data(), k, b.data(), k + 1, ref.data(), n + 1);
          ASSERT_EQ(c, ref) << "threads=" << threads << " m=" << m << " n=" << n << " k=" << k;
        }
  }
}

// A given as int8 rows (what the activation quantizer writes where oneDNN or the AMX tiles run the product):
// oneDNN reads them in place, the AMX tiles from a padded copy (the rows are not in their form), the tile
// packs each thread's share into strips. Every kernel (the default: the AMX tiles from 256 rows where the CPU
// has them; oneDNN forced; the tile forced), int32 C, the fused epilogue and the parts, against the
// references, with a row stride > k.
TEST(Int8Kernels, RowsGemmMatchesReferenceOnBothKernels) {
  for (const cpu::GemmKernel kernel : {cpu::GemmKernel::best, cpu::GemmKernel::onednn, cpu::GemmKernel::diffq}) {
    cpu::Tuning t = cpu::current_tuning();
    t.gemm_kernel = kernel;
    const cpu::ScopedTuning scope(t);
    if (kernel == cpu::GemmKernel::diffq) {
      ASSERT_FALSE(cpu::int8_uses_onednn());
    }
    if (kernel != cpu::GemmKernel::best) ASSERT_FALSE(cpu::int8_uses_amx());
    for (int threads : {1, 2}) {
      ThreadsGuard tg(threads);
      // Edges of every tile, and (last) a GEMM oneDNN runs in several column slices of several row
      // chunks per thread (int8_gemm.cpp: kOnednnSliceCols, kOnednnSliceRows): a wrong slice offset fails.
      std::vector<std::tuple<int64_t, int64_t, int64_t>> shapes;
      for (int64_t m : {1, 7, 37, 300})
        for (int64_t n : {1, 17, 40, 300})
          for (int64_t k : {1, 15, 33, 513}) shapes.emplace_back(m, n, k);
      shapes.emplace_back(2100, 600, 40);
      for (const auto& shape : shapes) {
        // Plain locals, not a structured binding: the lambdas below capture them (clang 14 refuses bindings).
        const int64_t m = std::get<0>(shape), n = std::get<1>(shape), k = std::get<2>(shape);
        const int64_t lda = k + 3;
        const auto a = random_s8(size_t(m * lda), uint32_t(m * 7 + n * 3 + k));
        const auto b = random_s8(size_t(n * k), uint32_t(m + n * 5 + k * 11));
        std::vector<int32_t> c(size_t(m * n), -7), ref(size_t(m * n), -7);
        cpu::gemm_s8s8_rows(m, n, k, a.data(), lda, b.data(), k, c.data(), n, nullptr);
        cpu::gemm_s8s8s32_reference(m, n, k, a.data(), lda, b.data(), k, ref.data(), n);
        ASSERT_EQ(c, ref) << "kernel=" << int(kernel) << " threads=" << threads << " m=" << m << " n=" << n
                          << " k=" << k;
        // The linear's epilogue fused (bf16 out, per-row scales, bias), whole and by parts.
        std::vector<float> rs(static_cast<size_t>(m)), cs(static_cast<size_t>(n)), bias(static_cast<size_t>(n));
        for (int64_t i = 0; i < m; ++i) rs[size_t(i)] = std::ldexp(1.0f + float(i % 5), -10);
        for (int64_t j = 0; j < n; ++j) cs[size_t(j)] = std::ldexp(1.0f + float(j % 3), -6), bias[size_t(j)] = float(j % 4) - 1.5f;
        cpu::Int8Epilogue ep;
        ep.row_scale = rs.data();
        ep.col_scale = cs.data();
        ep.bias = bias.data();
        ep.out = DType::bf16;
        ep.ldy = n;
        // The fused epilogue's output against the reference's, element type T for ep.out (bf16 bits, or float32:
        // int8dq on float32 activations, no bf16 roundings).
        auto fused_equals_reference = [&](auto element, DType out) {
          using T = decltype(element);
          std::vector<T> want(size_t(m * n)), got(size_t(m * n));
          ep.out = out;
          ep.y = want.data();
          cpu::int8_epilogue_reference(m, n, ref.data(), n, ep);
          ep.y = got.data();
          cpu::gemm_s8s8_rows(m, n, k, a.data(), lda, b.data(), k, nullptr, 0, &ep);
          EXPECT_EQ(got, want) << "fused epilogue into " << dtype_name(out) << ", m=" << m << " n=" << n << " k=" << k;
          return want;
        };
        fused_equals_reference(float(), DType::f32);
        const std::vector<uint16_t> want = fused_equals_reference(uint16_t(), DType::bf16);
        if (::testing::Test::HasFailure()) return;
        std::vector<float> parts_y(size_t(m * n), -7.0f);
        std::vector<int> seen(size_t(m * n), 0);
        cpu::GemmParts parts;
        parts.begin = [&](int64_t, int64_t, int64_t, int64_t, int64_t* ld) {
          *ld = n;
          thread_local std::vector<float> scratch;
          scratch.assign(size_t(m * n), 0.0f);
          return scratch.data();
        };
        parts.end = [&](int64_t r0, int64_t r1, int64_t c0, int64_t c1, const float* part, int64_t ld) {
          for (int64_t i = r0; i < r1; ++i)
            for (int64_t j = c0; j < c1; ++j) {
              parts_y[size_t(i * n + j)] = part[(i - r0) * ld + (j - c0)];
              ++seen[size_t(i * n + j)];
            }
        };
        cpu::gemm_s8s8_rows_parts(m, n, k, a.data(), lda, b.data(), k, ep, parts);
        for (int64_t e = 0; e < m * n; ++e) {
          ASSERT_EQ(seen[size_t(e)], 1) << e;
          ASSERT_EQ(parts_y[size_t(e)], bf16_to_f32(want[size_t(e)])) << "parts, element " << e;
        }
      }
    }
  }
}

// Fused epilogue == int32 C then the reference epilogue, for every output dtype, bias or not, scales per
// row or per tensor, including scales that overflow to inf and make NaN (inf * 0).
TEST(Int8Kernels, FusedEpilogueEqualsUnfused) {
  ThreadsGuard tg(2);
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{37, 50, 1030}, {13, 64, 96}, {1, 33, 7}, {12, 300, 515}})
    for (DType out : {DType::f32, DType::bf16, DType::f16})
      for (bool per_tensor : {false, true})
        for (bool with_bias : {false, true}) {
          const auto a = random_s8(size_t(m * k), 1), b = random_s8(size_t(n * k), 2);
          std::vector<float> rs(static_cast<size_t>(m)), cs(static_cast<size_t>(n)), bias(static_cast<size_t>(n));
          // powers of two in half the rows / columns: exact products, so bf16 / f16 rounding ties occur
          for (size_t i = 0; i < rs.size(); ++i) rs[i] = i % 2 ? std::ldexp(1.0f, -int(i % 7)) : std::ldexp(u(rng), -9);
          for (size_t j = 0; j < cs.size(); ++j) cs[j] = j % 2 ? std::ldexp(-1.0f, -int(j % 5)) : std::ldexp(u(rng), -7);
          for (auto& v : bias) v = u(rng);
          rs[0] = 3e38f;  // row 0 overflows to +-inf ...
          cs[size_t(n - 1)] = 0.0f;  // ... and inf * 0 = NaN in the last column
          // a denormal row scale: denormal products, kept by the epilogue's rounding (vcvtneps2bf16 would
          // flush them: oneDNN's bf16 store must not take that block)
          if (m > 1) rs[1] = -7 * std::numeric_limits<float>::denorm_min();
          std::vector<int16_t> ap(cpu::int8_packed_a_elems(m, k));
          cpu::pack_a_s8(m, k, a.data(), k, ap.data());
          std::vector<int32_t> c(size_t(m * n));
          cpu::gemm_s8s8_packed(m, n, k, ap.data(), b.data(), k, c.data(), n, nullptr);
          const size_t es = out == DType::f32 ? 4 : 2;
          std::vector<uint8_t> fused(size_t(m * n) * es), ref(size_t(m * n) * es);
          cpu::Int8Epilogue ep;
          ep.row_scale = rs.data();
          ep.per_tensor = per_tensor;
          ep.col_scale = cs.data();
          ep.bias = with_bias ? bias.data() : nullptr;
          ep.out = out;
          ep.ldy = n;
          ep.y = ref.data();
          cpu::int8_epilogue_reference(m, n, c.data(), n, ep);
          ep.y = fused.data();
          cpu::gemm_s8s8_packed(m, n, k, ap.data(), b.data(), k, nullptr, 0, &ep);
          ASSERT_EQ(std::memcmp(fused.data(), ref.data(), fused.size()), 0)
              << "m=" << m << " n=" << n << " k=" << k << " out=" << dtype_name(out) << " per_tensor=" << per_tensor
              << " bias=" << with_bias;
          // Part by part (compile's GEMM prologue): f32 values equal to the stored ones widened, each
          // element delivered once, in a part the size parts.begin was told.
          std::vector<float> parts_y(size_t(m * n), -7.0f);
          std::vector<int> seen(size_t(m * n), 0);
          cpu::GemmParts parts;
          // Init-captures: clang 14 cannot capture structured bindings (m, n) by reference.
          parts.begin = [&, m = m, n = n](int64_t r0, int64_t, int64_t c0, int64_t, int64_t* ld) {
            *ld = n + 3;  // a row stride of its own: the part lands in a scratch of the caller's choice
            thread_local std::vector<float> scratch;
            scratch.assign(size_t(m * (n + 3)), 0.0f);
            (void)r0, (void)c0;
            return scratch.data();
          };
          parts.end = [&, n = n](int64_t r0, int64_t r1, int64_t c0, int64_t c1, const float* part, int64_t ld) {
            for (int64_t i = r0; i < r1; ++i)
              for (int64_t j = c0; j < c1; ++j) {
                parts_y[size_t(i * n + j)] = part[(i - r0) * ld + (j - c0)];
                ++seen[size_t(i * n + j)];
              }
          };
          cpu::gemm_s8s8_packed_parts(m, n, k, ap.data(), b.data(), k, ep, parts);
          for (int64_t e = 0; e < m * n; ++e) {
            float want;
            if (out == DType::f32) std::memcpy(&want, ref.data() + e * 4, 4);
            else {
              uint16_t h;
              std::memcpy(&h, ref.data() + e * 2, 2);
              want = out == DType::bf16 ? bf16_to_f32(h) : f16_to_f32(h);
            }
            ASSERT_EQ(seen[size_t(e)], 1) << e;
            const float got = parts_y[size_t(e)];
            ASSERT_TRUE(std::memcmp(&got, &want, 4) == 0 || (std::isnan(got) && std::isnan(want)))
                << "parts: element " << e << " " << got << " vs " << want << " m=" << m << " n=" << n << " out="
                << dtype_name(out);
          }
        }
}

std::vector<float> special_row(int64_t k, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  std::vector<float> x(static_cast<size_t>(k));
  for (auto& v : x) v = u(rng);
  const float specials[] = {NAN, INFINITY, -INFINITY, -0.0f, 0.0f, 2.5f, -2.5f, 3.5f, 0.5f, -0.5f, 1e30f, -1e30f};
  for (size_t i = 0; i < x.size(); i += 3) x[i] = specials[(i / 3 + seed) % 12];
  return x;
}

// The row's largest magnitude (the symmetric scale's input) on bf16 bits and f32 lanes against the min / max
// folds: NaNs of either sign and payload never win, infinities do, denormals and signed zeros, all-NaN and
// empty rows give 0, lengths around the vector widths.
TEST(Int8Kernels, RowAbsMaxMatchesTheMinMaxFolds) {
  const uint16_t specials[] = {0x7fc0, 0xffc0, 0x7f81, 0xffff, 0x7f80, 0xff80, 0x8000, 0x0000, 0x0001, 0x8003,
                               0x007f, 0x3f80, 0xc2c8, 0x7f7f, 0xff7f};
  std::mt19937 rng(11);
  for (int64_t k : {0, 1, 5, 15, 16, 17, 31, 32, 33, 64, 100, 1536}) {
    for (int variant = 0; variant < 4; ++variant) {
      std::vector<uint16_t> xb(static_cast<size_t>(k));
      for (auto& v : xb) v = f32_to_bf16(std::uniform_real_distribution<float>(-3.0f, 3.0f)(rng));
      if (variant == 1)  // specials sprinkled over the row
        for (size_t i = 0; i < xb.size(); i += 7) xb[i] = specials[(i / 7) % std::size(specials)];
      if (variant == 2)  // every NaN pattern class only
        for (size_t i = 0; i < xb.size(); ++i) xb[i] = specials[i % 4];
      if (variant == 3 && k > 0) xb[size_t(k - 1)] = 0x7f80;  // inf in the tail
      std::vector<float> xf(xb.size());
      for (size_t i = 0; i < xb.size(); ++i) xf[i] = bf16_to_f32(xb[i]);
      EXPECT_EQ(cpu::int8_row_abs_max(xb.data(), DType::bf16, k), cpu::int8_row_abs_max_reference(xb.data(), DType::bf16, k))
          << "bf16 k=" << k << " variant " << variant;
      EXPECT_EQ(cpu::int8_row_abs_max(xf.data(), DType::f32, k), cpu::int8_row_abs_max_reference(xf.data(), DType::f32, k))
          << "f32 k=" << k << " variant " << variant;
    }
  }
  const float nans[] = {NAN, -NAN, NAN};
  EXPECT_EQ(cpu::int8_row_abs_max_reference(nans, DType::f32, 3), 0.0f);
  const float row[] = {-5.0f, NAN, 2.0f, -INFINITY};
  EXPECT_EQ(cpu::int8_row_abs_max_reference(row, DType::f32, 3), 5.0f);
  EXPECT_EQ(cpu::int8_row_abs_max_reference(row, DType::f32, 4), INFINITY);
}

TEST(Int8Kernels, ActivationRowsMatchReference) {
  for (int64_t k : {1, 3, 7, 8, 9, 16, 31, 64, 100}) {
    const auto xf = special_row(k, uint32_t(k));
    std::vector<uint16_t> xb(static_cast<size_t>(k));
    for (int64_t i = 0; i < k; ++i) xb[size_t(i)] = f32_to_bf16(xf[size_t(i)]);
    for (DType src : {DType::f32, DType::bf16}) {
      const void* x = src == DType::f32 ? static_cast<const void*>(xf.data()) : xb.data();
      EXPECT_EQ(cpu::int8_row_abs_max(x, src, k), cpu::int8_row_abs_max_reference(x, src, k)) << k;
      for (float recip : {1.0f, 10.0f, 0.37f}) {  // 1.0: the .5 values round half to even
        std::vector<int8_t> q(static_cast<size_t>(k));
        cpu::int8_quantize_row_reference(x, src, k, recip, q.data());
        std::vector<int8_t> rowq(static_cast<size_t>(k), 77);
        cpu::int8_quantize_row(x, src, k, recip, rowq.data());
        ASSERT_EQ(rowq, q) << "int8 rows, k=" << k << " recip=" << recip;
        std::vector<int16_t> strip(size_t(cpu::int8_packed_strip_elems(k)), 77);
        for (int64_t r = 0; r < 6; ++r) cpu::int8_quantize_row_packed(r == 4 ? x : nullptr, src, k, recip, strip.data(), r);
        for (int64_t c = 0; c < (k + 1) / 2 * 2; ++c) {
          const int16_t want = c < k ? q[size_t(c)] : 0;
          ASSERT_EQ(strip[size_t((c / 2) * 12 + 4 * 2 + c % 2)], want) << "k=" << k << " c=" << c << " recip=" << recip;
          ASSERT_EQ(strip[size_t((c / 2) * 12 + 1 * 2 + c % 2)], 0);
        }
      }
    }
  }
  // The reference's own rounding: half to even, clamp, NaN -> 0.
  const float x[] = {2.5f, 3.5f, -2.5f, 300.0f, -300.0f, NAN, INFINITY};
  int8_t q[7];
  cpu::int8_quantize_row_reference(x, DType::f32, 7, 1.0f, q);
  const int8_t want[] = {2, 4, -2, 127, -128, 0, 127};
  for (int i = 0; i < 7; ++i) EXPECT_EQ(q[i], want[i]) << i;
}

// The whole linear against the unfused scalar composition it replaced.
Tensor unfused_linear(const Tensor& x, const Tensor& bias, const tao::AffineInt8Weight& w) {
  const int64_t n = w.shape()[0], k = w.shape()[1];
  const DType dt = x.dtype();
  const Tensor xf = x.to(DType::f32).contiguous();
  const int64_t m = xf.numel() / k;
  const bool per_tensor = w.act_granularity()->type == tao::Granularity::PerTensor;
  std::vector<int8_t> q(size_t(m * k));
  std::vector<float> xs;
  cpu::quantize_activations_int8(xf.data<float>(), m, k, dt, per_tensor, q.data(), xs);
  std::vector<int32_t> c(size_t(m * n));
  cpu::gemm_s8s8s32_reference(m, n, k, q.data(), k, w.qdata().data<int8_t>(), k, c.data(), n);
  const std::vector<float> bv = bias.defined() ? bias.to_f32_vector() : std::vector<float>{};
  std::vector<float> y(size_t(m * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      float t = round_through(dt, float(c[size_t(i * n + j)]) * xs[per_tensor ? 0 : size_t(i)]) * w.scale_at(j, 0);
      if (!bv.empty()) t += bv[size_t(j)];
      y[size_t(i * n + j)] = round_through(dt, t);
    }
  Shape shape = x.shape();
  shape.back() = n;
  return Tensor::from_vector(y, shape, DType::f32).to(dt);
}

TEST(Int8Kernels, DynamicLinearEqualsUnfusedComposition) {
  ThreadsGuard tg(2);
  Generator g(3);
  // (300 and 256 rows: the AMX tiles where the CPU has them, on the quantizer's padded rows)
  for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{37, 50, 1030}, {1, 40, 515}, {14, 300, 64},
                         {300, 70, 130}, {256, 32, 64}})
    for (DType dt : {DType::f32, DType::bf16, DType::f16})
      for (auto act : {tao::Granularity::PerRow, tao::Granularity::PerTensor})
        for (bool with_bias : {false, true}) {
          const Tensor w = ops::mul_scalar(randn_tensor({n, k}, g, DType::f32), 0.05).to(dt);
          const Tensor x = randn_tensor({1, m, k}, g, DType::f32).to(dt);
          const Tensor b = with_bias ? randn_tensor({n}, g, DType::f32).to(dt) : Tensor();
          tao::Granularity wg, ag;
          ag.type = act;
          const auto qw = tao::AffineInt8Weight::quantize_int8(w, wg, ag);
          const Tensor got = qw->linear(x, b), want = unfused_linear(x, b, *qw);
          ASSERT_EQ(got.shape(), want.shape());
          ASSERT_EQ(got.dtype(), dt);
          const size_t bytes = size_t(got.numel()) * (dt == DType::f32 ? 4 : 2);
          EXPECT_EQ(std::memcmp(got.contiguous().data_ptr(), want.contiguous().data_ptr(), bytes), 0)
              << "m=" << m << " n=" << n << " k=" << k << " dtype=" << dtype_name(dt) << " per_tensor="
              << (act == tao::Granularity::PerTensor) << " bias=" << with_bias;
        }
}

}  // namespace
