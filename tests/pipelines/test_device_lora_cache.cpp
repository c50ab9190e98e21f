// LoRA adapters (unfused, several, weighted) and the step caches on a pipeline placed on an accelerator,
// checked host-side on the fake device (fake_device.h): the CPU run's bits, every op on the device, the
// adapters' weights uploaded with the model (not per call).
#include <gtest/gtest.h>

#include "diffq/cache.h"
#include "pipeline_test_util.h"
#include "placement_test_util.h"

namespace diffq {
namespace {

const std::filesystem::path kFixtures = "tests/fixtures";

// Loads tiny-flux (on `device`), two adapters weighted 0.7 / -0.4, and the cache `method`.
std::unique_ptr<DiffusionPipeline> prepared(Device device, CacheOptions::Method method) {
  PipelineOptions po;
  po.dtype = DType::f32;
  po.device = device;
  auto pipe = DiffusionPipeline::from_pretrained(kFixtures / "tiny-flux", po);
  pipe->load_lora(kFixtures / "lora" / "peft_a.safetensors", "a");
  pipe->load_lora(kFixtures / "lora" / "peft_b_alpha.safetensors", "b");
  pipe->set_adapters({"a", "b"}, {0.7, -0.4});
  if (method != CacheOptions::Method::none) {
    CacheOptions c;
    c.method = method;
    c.threshold = 10.0;  // generous: the tiny model's steps are skipped, so the cache's path runs
    c.cache_interval = 2;
    c.disable_cache_before_step = 1;
    pipe->enable_cache(c);
  }
  return pipe;
}

std::string method_name(CacheOptions::Method m) {
  static const char* names[] = {"none", "first_block", "taylorseer", "magcache", "teacache"};
  return names[int(m)];
}

class DeviceLoraCache : public ::testing::TestWithParam<CacheOptions::Method> {};

TEST_P(DeviceLoraCache, TwoUnfusedAdaptersAndTheCacheRunOnTheDeviceAsOnTheCpu) {
  GenerateParams g = testing::small_call(false);
  g.num_inference_steps = 4;
  const GenerateResult cpu = prepared(Device::cpu(), GetParam())->generate(g);
  testing::FakeDevice dev;
  {
    auto pipe = prepared(Device::cuda(0), GetParam());
    dev.clear_records();
    const GenerateResult r = pipe->generate(g);
    testing::expect_all_on_device(dev.records(), "lora + cache");
    EXPECT_EQ(r.cache.computed, cpu.cache.computed);
    EXPECT_EQ(r.cache.skipped, cpu.cache.skipped);
    if (GetParam() != CacheOptions::Method::none) EXPECT_GT(r.cache.skipped, 0) << "the cache never skipped a step";
    EXPECT_EQ(testing::rel_err(r.latents, cpu.latents), 0.0);
  }
  EXPECT_EQ(dev.live_bytes(), 0);
}

// fuse_lora on the device: B @ A added to the device's weights; unfuse_lora gives the unfused model back.
TEST(DeviceLora, FuseAndUnfuseOnTheDeviceAsOnTheCpu) {
  const GenerateParams g = testing::small_call(false);
  auto cpu = prepared(Device::cpu(), CacheOptions::Method::none);
  const Tensor unfused_cpu = cpu->generate(g).latents;
  cpu->fuse_lora(1.0);
  const Tensor fused_cpu = cpu->generate(g).latents;
  testing::FakeDevice dev;
  {
    auto pipe = prepared(Device::cuda(0), CacheOptions::Method::none);
    pipe->fuse_lora(1.0);
    dev.clear_records();
    EXPECT_EQ(testing::rel_err(pipe->generate(g).latents, fused_cpu), 0.0);
    testing::expect_all_on_device(dev.records(), "fused lora");
    pipe->unfuse_lora();
    EXPECT_EQ(testing::rel_err(pipe->generate(g).latents, unfused_cpu), 0.0);
  }
  EXPECT_EQ(dev.live_bytes(), 0);
}

INSTANTIATE_TEST_SUITE_P(Caches, DeviceLoraCache,
                         ::testing::Values(CacheOptions::Method::none, CacheOptions::Method::first_block,
                                           CacheOptions::Method::taylorseer, CacheOptions::Method::magcache,
                                           CacheOptions::Method::teacache),
                         [](const auto& info) { return method_name(info.param); });

}  // namespace
}  // namespace diffq
