// cuBLASLt plans are built once per shape (src/backend/cuda/gemm.cpp, keyed by gemm_plan.h's GemmKey):
// the key's identity is checked host-side (no GPU); on a GPU, a repeated linear shape must hit the cache
// and give the same bits, and a new shape must miss once.
#include <gtest/gtest.h>

#include "backend/cuda/gemm_plan.h"
#include "gpu_test.h"
#include "ops/ops.h"

using namespace diffq;
using namespace diffq::backend::cuda;

namespace {

TEST(CudaGemmPlanKey, EqualShapesShareAPlanAndEveryFieldSeparatesThem) {
  PlanCache<GemmKey, int, GemmKeyHash> cache;
  const GemmKey base{0, int(DType::bf16), 4608, 3072, 3072, 1, true, false, true, 256, 256, 256};
  int builds = 0;
  auto get = [&](const GemmKey& k) { return cache.get_or_build(k, [&] { return std::make_shared<int>(++builds); }); };
  EXPECT_EQ(*get(base), 1);
  EXPECT_EQ(*get(base), 1);  // hit: not rebuilt
  std::vector<GemmKey> variants(12, base);
  variants[0].device = 1;
  variants[1].dtype = int(DType::f16);
  variants[2].m = 4096;
  variants[3].n = 12288;
  variants[4].k = 12288;
  variants[5].batch = 2;
  variants[6].w_nk = false;
  variants[7].w_batched = true;
  variants[8].bias = false;
  variants[9].align_w = 16;
  variants[10].align_x = 16;
  variants[11].align_d = 16;
  for (size_t i = 0; i < variants.size(); ++i) {
    EXPECT_FALSE(variants[i] == base) << i;
    EXPECT_EQ(*get(variants[i]), int(i) + 2) << "variant " << i << " must build its own plan";
  }
  const PlanCacheStats s = cache.stats();
  EXPECT_EQ(s.hits, 1);
  EXPECT_EQ(s.misses, 13);
  EXPECT_EQ(s.entries, 13);
}

TEST(CudaGemmPlans, ARepeatedShapeHitsTheCacheAndGivesTheSameBits) {
  DIFFQ_REQUIRE_GPU();
  const Tensor x = cudatest::random_values({37, 96}, DType::bf16, 1).to(cudatest::gpu());
  const Tensor w = cudatest::random_values({80, 96}, DType::bf16, 2).to(cudatest::gpu());
  const Tensor b = cudatest::random_values({80}, DType::bf16, 3).to(cudatest::gpu());
  const PlanCacheStats s0 = gemm_plan_cache_stats();
  const Tensor y1 = ops::linear(x, w, b);
  const PlanCacheStats s1 = gemm_plan_cache_stats();
  const Tensor y2 = ops::linear(x, w, b);
  const PlanCacheStats s2 = gemm_plan_cache_stats();
  EXPECT_EQ(s1.misses, s0.misses + 1) << "a new shape builds its plan once";
  EXPECT_EQ(s2.misses, s1.misses) << "the same shape must not build again";
  EXPECT_EQ(s2.hits, s1.hits + 1);
  EXPECT_EQ(cudatest::bytes_of(y1.to(Device::cpu())), cudatest::bytes_of(y2.to(Device::cpu())));
  // Against the CPU within bf16 tolerance.
  const Tensor ref = ops::linear(x.to(Device::cpu()), w.to(Device::cpu()), b.to(Device::cpu()));
  const auto got = y1.to(Device::cpu()).to_f32_vector(), want = ref.to_f32_vector();
  double worst = 0, scale = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    worst = std::max(worst, std::abs(double(got[i]) - want[i]));
    scale = std::max(scale, std::abs(double(want[i])));
  }
  EXPECT_LT(worst / scale, 1e-2);
}

}  // namespace
