// Dense bf16 linear weights packed once for oneDNN (backend/cpu/packed_linear_weight.h): the packed form
// gives the dense weight back bit for bit, its linear_q kernel gives the bits of the dense bf16 linear
// on oneDNN (odd sizes, column tails, 1 and 2 threads, biases, 1-D / 3-D / strided inputs), and the
// packing policy follows the tuning and the CPU. Skips, naming the missing feature, where oneDNN has
// no native bf16 matmul that reads packed weights.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "backend/cpu/cpu_features.h"
#include "common/linear_exact_bound.h"
#include "common/random_tensor.h"
#include "backend/cpu/linear.h"
#include "diffq/error.h"
#include "backend/cpu/onednn_gemm.h"
#include "backend/cpu/packed_linear_weight.h"
#include "backend/cpu/threads.h"
#include "backend/cpu/tuning.h"
#include "ops/linear_q.h"
#include "ops/ops.h"
#include "ops/weight_packing.h"

using namespace diffq;
namespace cpu = diffq::backend::cpu;

namespace {

#define DIFFQ_REQUIRE_PACKING()                                                                          \
  do {                                                                                                   \
    if (!cpu::onednn_bf16_packing_usable())                                                              \
      GTEST_SKIP() << "needs oneDNN's native bf16 matmul on packed weights (AVX512-BF16 or AMX-BF16; "   \
                   << "this CPU: avx512_bf16=" << cpu::cpu_features().avx512_bf16                        \
                   << ", amx_bf16=" << cpu::cpu_features().amx_bf16 << "): " << cpu::onednn_bf16_impl(); \
  } while (0)

using diffq::testing::randn;
const auto bits = diffq::testing::bits16;

// got == want bit for bit (measured so on AVX512-BF16 and on AMX).
void expect_dense_bits(const Tensor& got, const Tensor& want, const std::string& what) {
  EXPECT_EQ(bits(got.to(DType::bf16)), bits(want.to(DType::bf16))) << what;
}

cpu::Tuning tuning(cpu::WeightPacking packing, cpu::GemmKernel kernel = cpu::GemmKernel::onednn) {
  cpu::Tuning t = cpu::current_tuning();
  t.weight_packing = packing;
  t.gemm_kernel = kernel;
  return t;
}

const Shape kWeights[] = {{16, 16}, {17, 40}, {64, 64}, {96, 33}, {200, 129}, {300, 96}, {130, 256}};

TEST(PackedBf16Weight, UnpacksToTheSameBits) {
  DIFFQ_REQUIRE_PACKING();
  uint32_t seed = 10;
  for (const Shape& s : kWeights) {
    const Tensor w = randn(s, seed++, DType::bf16);
    const cpu::PackedBf16Weight p(w);
    EXPECT_EQ(p.shape(), s);
    EXPECT_EQ(p.scheme(), cpu::kPackedBf16Scheme);
    EXPECT_EQ(bits(p.dequantize(DType::bf16)), bits(w)) << shape_str(s);
    EXPECT_EQ(p.dequantize(DType::f32).dtype(), DType::f32);
    // A weight whose rows are wider than its columns (a view of a wider matrix) packs its columns only.
    const Tensor wide = randn({s[0], s[1] + 7}, seed++, DType::bf16);
    const Tensor view = wide.slice(1, 3, 3 + s[1]);
    EXPECT_EQ(bits(cpu::PackedBf16Weight(view).dequantize(DType::bf16)), bits(view)) << shape_str(s) << " view";
  }
}

TEST(PackedBf16Weight, RefusesWhatItCannotPack) {
  EXPECT_THROW(cpu::PackedBf16Weight(randn({32, 32}, 1, DType::f32)), Error);
  EXPECT_THROW(cpu::PackedBf16Weight(randn({32, 32}, 1, DType::bf16).transpose(0, 1)), Error);
}

// linear_q on the packed weight against the dense bf16 linear on oneDNN: the same bits.
TEST(PackedBf16Weight, LinearGivesTheDenseLinearsBits) {
  DIFFQ_REQUIRE_PACKING();
  const cpu::ScopedTuning scope(tuning(cpu::WeightPacking::on));
  uint32_t seed = 100;
  for (const int threads : {1, 2}) {
    cpu::set_num_threads(threads);
    for (const Shape& s : kWeights)
      for (const int64_t m : {1, 7, 48, 333}) {
        const Tensor w = randn(s, seed++, DType::bf16);
        const cpu::PackedBf16Weight p(w);
        const Tensor x = randn({m, s[1]}, seed++, DType::bf16);
        for (const int bias_kind : {0, 1, 2}) {  // none, bf16, f32
          const Tensor b = bias_kind == 0 ? Tensor() : randn({s[0]}, seed++, bias_kind == 1 ? DType::bf16 : DType::f32);
          const Tensor want = ops::linear(x, w, b), got = ops::linear_q(x, p, b);
          ASSERT_EQ(got.shape(), want.shape());
          ASSERT_EQ(got.dtype(), DType::bf16);
          const std::string what = "threads " + std::to_string(threads) + " x [" + std::to_string(m) + ", " +
                                   std::to_string(s[1]) + "] w " + shape_str(s) + " bias kind " + std::to_string(bias_kind);
          Tensor direct;  // the packed GEMM itself ran (linear_q falls back to the dense linear elsewhere)
          ASSERT_TRUE(cpu::linear_bf16_packed(x, p.data(), s[0], s[1], b, direct)) << what;
          EXPECT_EQ(bits(direct), bits(got)) << what;
          expect_dense_bits(got, want, what);
        }
      }
  }
  // 1-D, 3-D and strided inputs; an f32 input runs the dense linear on the unpacked weight.
  const Tensor w = randn({200, 129}, seed++, DType::bf16), b = randn({200}, seed++, DType::bf16);
  const cpu::PackedBf16Weight p(w);
  const Tensor x3 = randn({2, 50, 129}, seed++, DType::bf16);
  const Tensor strided = randn({60, 140}, seed++, DType::bf16).slice(1, 5, 134);
  const Tensor x1 = randn({129}, seed++, DType::bf16);
  const Tensor xf = randn({9, 129}, seed++, DType::f32);
  for (const Tensor& x : {x3, strided, x1, xf}) {
    const Tensor want = ops::linear(x, w, b), got = ops::linear_q(x, p, b);
    ASSERT_EQ(got.shape(), want.shape());
    ASSERT_EQ(got.dtype(), want.dtype());
    expect_dense_bits(got, want, x.str());
  }
  cpu::set_num_threads(0);
}

// A weight over 16 MiB packed runs in several oneDNN calls of at most 16 MiB of packed columns each
// (gemm.cpp: packed_cols_per_call; 2048 columns at K 4096): [2200, 4096] is one full slice and one of
// 152 columns, with the rows split (M 520: >= kPackedRowsPerPart per thread) and the columns split
// (M 150) between 2 threads. Checked
// against the exact f64 value (half a bf16 ulp plus the f32 summation bound): at K 4096 oneDNN blocks
// K differently for the plain weight and for a slice's width, so the dense linear's bits may differ
// by an ulp (measured on AMX), while a slice at the wrong columns would be off by whole values.
TEST(PackedBf16Weight, WeightsOverASliceRunInSlices) {
  DIFFQ_REQUIRE_PACKING();
  const cpu::ScopedTuning scope(tuning(cpu::WeightPacking::on));
  const int64_t n = 2200, k = 4096;
  const Tensor w = randn({n, k}, 500, DType::bf16), b = randn({n}, 501, DType::f32);
  const std::vector<float> wf = w.to_f32_vector(), bf = b.to_f32_vector();
  const cpu::PackedBf16Weight p(w);
  for (const int threads : {1, 2}) {
    cpu::set_num_threads(threads);
    for (const int64_t m : {150, 520}) {
      const Tensor x = randn({m, k}, 502 + uint32_t(m), DType::bf16);
      const std::vector<float> xf = x.to_f32_vector();
      const std::string what = "threads " + std::to_string(threads) + " M " + std::to_string(m);
      Tensor direct;
      ASSERT_TRUE(cpu::linear_bf16_packed(x, p.data(), n, k, b, direct)) << what;
      const std::vector<float> y = direct.to_f32_vector();
      for (int64_t i = 0; i < m; i += (i >= 248 && i < 264) || m < 256 ? 1 : 9)  // every row near the rows' seam
        for (int64_t j = 0; j < n; j += j >= 2040 ? 1 : 7)  // every column near the slices' seam, 1 in 7 else
          ASSERT_TRUE(diffq::testing::bf16_linear_output_near_exact(y[size_t(i * n + j)], xf.data() + i * k,
                                                                    wf.data() + j * k, k, bf[size_t(j)]))
              << what << " (" << i << ", " << j << ")";
    }
  }
  cpu::set_num_threads(0);
}

TEST(PackedBf16Weight, PolicyFollowsTheTuningAndTheCpu) {
  const Tensor w = randn({64, 64}, 1, DType::bf16);
  {
    const cpu::ScopedTuning scope(tuning(cpu::WeightPacking::off));
    EXPECT_FALSE(cpu::cpu_packs_linear_weight(w, DType::bf16));
    EXPECT_EQ(ops::pack_linear_weight(w, DType::bf16, Device::cpu()), nullptr);
  }
  {
    const cpu::ScopedTuning scope(tuning(cpu::WeightPacking::on));
    EXPECT_EQ(cpu::cpu_packs_linear_weight(w, DType::bf16), cpu::onednn_bf16_packing_usable());
    EXPECT_FALSE(cpu::cpu_packs_linear_weight(w, DType::f32));            // f32 input
    EXPECT_FALSE(cpu::cpu_packs_linear_weight(w.to(DType::f32), DType::bf16));            // f32 weight
    EXPECT_FALSE(cpu::cpu_packs_linear_weight(randn({8, 64}, 3, DType::bf16), DType::bf16));  // < 16 rows
    if (cpu::onednn_bf16_packing_usable()) {
      const auto p = ops::pack_linear_weight(w, DType::bf16, Device::cpu());
      ASSERT_NE(p, nullptr);
      EXPECT_EQ(p->scheme(), cpu::kPackedBf16Scheme);
    }
  }
  {  // on: also where oneDNN is not the bf16 GEMM
    const cpu::ScopedTuning scope(tuning(cpu::WeightPacking::on, cpu::GemmKernel::diffq));
    EXPECT_EQ(cpu::cpu_packs_linear_weight(w, DType::bf16), cpu::onednn_bf16_packing_usable());
  }
  {  // best: where oneDNN is the bf16 GEMM (AMX, AMD with AVX512-BF16), derived from the CPU as gemm.cpp does
    const cpu::ScopedTuning scope(tuning(cpu::WeightPacking::best, cpu::GemmKernel::best));
    const bool onednn_is_the_gemm = cpu::onednn_bf16_uses_amx() ||
                                    (cpu::cpu_features().amd && cpu::onednn_bf16_impl().find("avx512_core_bf16") != std::string::npos);
    EXPECT_EQ(cpu::cpu_packs_linear_weight(w, DType::bf16), onednn_is_the_gemm && cpu::onednn_bf16_packing_usable())
        << "AMX: " << cpu::onednn_bf16_uses_amx() << ", AMD: " << cpu::cpu_features().amd << ", bf16 "
        << cpu::onednn_bf16_impl();
  }
  {
    const cpu::ScopedTuning scope(tuning(cpu::WeightPacking::best, cpu::GemmKernel::diffq));
    EXPECT_FALSE(cpu::cpu_packs_linear_weight(w, DType::bf16));
  }
}

}  // namespace
