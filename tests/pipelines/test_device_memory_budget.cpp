// The memory-budget planner on a pipeline placed on an accelerator (the fake device, fake_device.h, says
// how much memory it has available): `--max-memory auto` plans for what the device has, a larger size is
// clamped to it, and the offloaded weights' homes are in host memory (not disk) on a GPU.
#include <gtest/gtest.h>

#include "diffq/pipeline.h"
#include "pipeline_test_util.h"
#include "placement_test_util.h"

namespace diffq {
namespace {

const std::filesystem::path kFixtures = "tests/fixtures";

std::unique_ptr<DiffusionPipeline> on_device() {
  PipelineOptions po;
  po.dtype = DType::f32;
  po.device = Device::cuda(0);
  return DiffusionPipeline::from_pretrained(kFixtures / "tiny-flux", po);
}

TEST(DeviceMemoryBudget, AutoPlansForWhatTheDeviceHasAndHomesAreInHostMemory) {
  GenerateParams g = testing::small_call(false);
  const GenerateResult cpu = testing::run_on_cpu(kFixtures / "tiny-flux", g);
  testing::FakeDevice dev;
  {
    int64_t weights = 0;
    {
      auto probe = on_device();
      weights = dev.live_bytes();  // every weight placed on the device at load
    }
    ASSERT_GT(weights, 0);
    // Plenty: nothing offloaded.
    dev.set_memory_available(weights * 100);
    auto roomy = on_device();
    const std::string none = roomy->enable_memory_budget("auto");
    EXPECT_EQ(none.rfind("none", 0), 0u) << none;
    EXPECT_NE(none.find("auto: "), std::string::npos) << none;
    EXPECT_NE(none.find("available on cuda:0"), std::string::npos) << none;
    roomy.reset();
    // Half the weights: offloaded, homes in host memory, the CPU's bits.
    dev.set_memory_available(weights / 2);
    auto tight = on_device();
    const std::string plan = tight->enable_memory_budget("auto");
    EXPECT_EQ(plan.rfind("none", 0), std::string::npos) << plan;
    EXPECT_EQ(plan.find("from disk"), std::string::npos) << plan;
    EXPECT_NE(plan.find("host "), std::string::npos) << plan;
    EXPECT_EQ(testing::rel_err(tight->generate(g).latents, cpu.latents), 0.0) << plan;
    tight.reset();
    // A size beyond what the device has is clamped (and said).
    auto asked = on_device();
    const std::string clamped = asked->enable_memory_budget("64GiB");
    EXPECT_NE(clamped.find("--max-memory 64GiB clamped to"), std::string::npos) << clamped;
    EXPECT_EQ(clamped.rfind("none", 0), std::string::npos) << clamped;
  }
  EXPECT_EQ(dev.live_bytes(), 0);
}

TEST(DeviceMemoryBudget, AutoOnTheCpuIsAClearError) {
  PipelineOptions po;
  po.dtype = DType::f32;
  auto pipe = DiffusionPipeline::from_pretrained(kFixtures / "tiny-flux", po);
  try {
    pipe->enable_memory_budget("auto");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--max-memory auto reads the GPU's free memory"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace diffq
