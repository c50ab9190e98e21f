// The cuDNN plan caches' key and container (src/backend/cuda/plan_cache.h, cudnn_plan_keys.h), checked
// on the CPU: equal keys hit, a key differing in any one field misses, the counters count, a failed
// build is not stored, and the stride normalisation / in-place rules of the sdpa path. No GPU needed.
#include <gtest/gtest.h>

#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/cuda/cudnn_plan_keys.h"
#include "backend/cuda/plan_cache.h"

using namespace diffq;
using namespace diffq::backend::cuda;

namespace {

struct FakePlan {
  int built_for = 0;
};

SdpaPlanKey flux_key() {
  SdpaPlanKey k;
  k.device = 0;
  k.dtype = DType::bf16;
  k.B = 1, k.H = 24, k.Sq = 4608, k.Sk = 4608, k.D = 128, k.Dv = 128;
  k.q = k.k = k.v = {24 * 4608 * 128, 128, 24 * 128, 1};  // [B, S, H, D] permuted to [B, H, S, D]
  k.o = {24 * 4608 * 128, 4608 * 128, 128, 1};
  k.scale = 0.08838834764831845f;
  return k;
}

// One key per field of SdpaPlanKey, each differing from flux_key() in that field only.
std::vector<std::pair<std::string, std::function<void(SdpaPlanKey&)>>> sdpa_mutations() {
  return {{"device", [](SdpaPlanKey& k) { k.device = 1; }},
          {"dtype", [](SdpaPlanKey& k) { k.dtype = DType::f16; }},
          {"B", [](SdpaPlanKey& k) { k.B = 2; }},
          {"H", [](SdpaPlanKey& k) { k.H = 12; }},
          {"Sq", [](SdpaPlanKey& k) { k.Sq = 4096; }},
          {"Sk", [](SdpaPlanKey& k) { k.Sk = 512; }},
          {"D", [](SdpaPlanKey& k) { k.D = 64; }},
          {"Dv", [](SdpaPlanKey& k) { k.Dv = 64; }},
          {"q stride", [](SdpaPlanKey& k) { k.q[2] = 128; }},
          {"k stride", [](SdpaPlanKey& k) { k.k[1] = 4608 * 128; }},
          {"v stride", [](SdpaPlanKey& k) { k.v[0] = 1; }},
          {"o stride", [](SdpaPlanKey& k) { k.o[3] = 2; }},
          {"scale", [](SdpaPlanKey& k) { k.scale = 0.125f; }},
          {"mask", [](SdpaPlanKey& k) { k.mask = SdpaMaskKind::additive; }}};
}

}  // namespace

TEST(CudnnPlanCache, EqualSdpaKeysHitAndEveryFieldMisses) {
  PlanCache<SdpaPlanKey, FakePlan, SdpaPlanKeyHash> cache;
  int builds = 0;
  auto build = [&] {
    ++builds;
    return std::make_shared<FakePlan>(FakePlan{builds});
  };
  const auto first = cache.get_or_build(flux_key(), build);
  const auto again = cache.get_or_build(flux_key(), build);
  EXPECT_EQ(first, again);  // the same plan object, built once
  EXPECT_EQ(builds, 1);
  PlanCacheStats st = cache.stats();
  EXPECT_EQ(st.hits, 1);
  EXPECT_EQ(st.misses, 1);
  EXPECT_EQ(st.entries, 1);

  const auto mutations = sdpa_mutations();
  for (const auto& [field, mutate] : mutations) {
    SdpaPlanKey k = flux_key();
    mutate(k);
    EXPECT_FALSE(k == flux_key()) << field;
    const int before = builds;
    const auto p = cache.get_or_build(k, build);
    EXPECT_EQ(builds, before + 1) << field << " should miss";
    EXPECT_NE(p, first) << field;
    EXPECT_EQ(cache.get_or_build(k, build), p) << field << " should hit the second time";
  }
  st = cache.stats();
  EXPECT_EQ(st.misses, 1 + int64_t(mutations.size()));
  EXPECT_EQ(st.hits, 1 + int64_t(mutations.size()));
  EXPECT_EQ(st.entries, 1 + int64_t(mutations.size()));
  EXPECT_EQ(cache.peek(flux_key()), first);  // peek counts nothing
  EXPECT_EQ(cache.stats().hits, st.hits);

  cache.clear();
  EXPECT_EQ(cache.stats().entries, 0);
  EXPECT_EQ(cache.stats().hits, 0);
  EXPECT_EQ(cache.peek(flux_key()), nullptr);
}

TEST(CudnnPlanCache, EqualConvKeysHitAndEveryFieldMisses) {
  PlanCache<ConvPlanKey, FakePlan, ConvPlanKeyHash> cache;
  ConvPlanKey base;
  base.dtype = DType::bf16;
  base.N = 1, base.C = 512, base.H = 128, base.W = 128, base.O = 512, base.KH = 3, base.KW = 3;
  base.stride = 1;
  base.pad = {1, 1, 1, 1};
  base.bias = true;
  int builds = 0;
  auto build = [&] { return std::make_shared<FakePlan>(FakePlan{++builds}); };
  cache.get_or_build(base, build);
  cache.get_or_build(base, build);
  EXPECT_EQ(builds, 1);
  const std::vector<std::pair<std::string, std::function<void(ConvPlanKey&)>>> mutations = {
      {"device", [](ConvPlanKey& k) { k.device = 3; }},
      {"dtype", [](ConvPlanKey& k) { k.dtype = DType::f32; }},
      {"N", [](ConvPlanKey& k) { k.N = 2; }},
      {"C", [](ConvPlanKey& k) { k.C = 256; }},
      {"H", [](ConvPlanKey& k) { k.H = 64; }},
      {"W", [](ConvPlanKey& k) { k.W = 64; }},
      {"O", [](ConvPlanKey& k) { k.O = 256; }},
      {"KH", [](ConvPlanKey& k) { k.KH = 1; }},
      {"KW", [](ConvPlanKey& k) { k.KW = 1; }},
      {"stride", [](ConvPlanKey& k) { k.stride = 2; }},
      {"pad top", [](ConvPlanKey& k) { k.pad[0] = 0; }},
      {"pad left", [](ConvPlanKey& k) { k.pad[1] = 0; }},
      {"pad bottom", [](ConvPlanKey& k) { k.pad[2] = 0; }},
      {"pad right", [](ConvPlanKey& k) { k.pad[3] = 0; }},
      {"bias", [](ConvPlanKey& k) { k.bias = false; }},
      {"pad mode", [](ConvPlanKey& k) { k.pad_mode = ConvPadMode::copy; }}};
  for (const auto& [field, mutate] : mutations) {
    ConvPlanKey k = base;
    mutate(k);
    const int before = builds;
    cache.get_or_build(k, build);
    EXPECT_EQ(builds, before + 1) << field << " should miss";
  }
  const PlanCacheStats st = cache.stats();
  EXPECT_EQ(st.hits, 1);
  EXPECT_EQ(st.misses, 1 + int64_t(mutations.size()));
}

TEST(CudnnPlanCache, AFailedBuildIsNotStored) {
  PlanCache<ConvPlanKey, FakePlan, ConvPlanKeyHash> cache;
  const ConvPlanKey k;
  EXPECT_THROW(cache.get_or_build(k, []() -> std::shared_ptr<FakePlan> { throw std::runtime_error("no"); }),
               std::runtime_error);
  EXPECT_EQ(cache.stats().entries, 0);
  EXPECT_EQ(cache.stats().misses, 1);
  EXPECT_NE(cache.get_or_build(k, [] { return std::make_shared<FakePlan>(); }), nullptr);
  EXPECT_EQ(cache.stats().entries, 1);
}

TEST(CudnnPlanCache, SdpaStridesOfSizeOneDimsAreNormalised) {
  // B = 1: the batch stride is never used, so two views differing there get the same key strides.
  const std::array<int64_t, 4> sizes = {1, 24, 4608, 128};
  const Strides4 a = sdpa_key_strides(sizes, {24 * 4608 * 128, 128, 24 * 128, 1});
  const Strides4 b = sdpa_key_strides(sizes, {7, 128, 24 * 128, 1});
  EXPECT_EQ(a, b);
  EXPECT_EQ(a[0], 4608 * 24 * 128);  // the whole span: no overlap with the other dims
  EXPECT_EQ(a[1], 128);
  EXPECT_EQ(a[2], 24 * 128);
  // Dims of size > 1 keep their strides.
  const Strides4 c = sdpa_key_strides({2, 3, 5, 8}, {120, 40, 8, 1});
  EXPECT_EQ(c, (Strides4{120, 40, 8, 1}));
}

TEST(CudnnPlanCache, SdpaInPlaceViewRules) {
  const std::array<int64_t, 4> sizes = {1, 24, 4608, 128};
  // FLUX's permuted view: head dim contiguous, other strides multiples of 8 elements.
  EXPECT_TRUE(sdpa_strides_usable(sizes, sdpa_key_strides(sizes, {24 * 4608 * 128, 128, 24 * 128, 1})));
  // A transposed head dim, an odd row stride, a broadcast (stride 0) head dim: copied first.
  EXPECT_FALSE(sdpa_strides_usable(sizes, sdpa_key_strides(sizes, {24 * 4608 * 128, 4608 * 128, 1, 4608})));
  EXPECT_FALSE(sdpa_strides_usable({1, 2, 5, 8}, sdpa_key_strides({1, 2, 5, 8}, {90, 45, 9, 1})));
  EXPECT_FALSE(sdpa_strides_usable({2, 3, 5, 8}, sdpa_key_strides({2, 3, 5, 8}, {40, 0, 8, 1})));
}
