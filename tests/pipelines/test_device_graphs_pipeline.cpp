// `compile regional` with mode reduce-overhead on a pipeline placed on an accelerator, checked host-side on
// the fake device (fake_device.h captures and replays as CUDA graphs do): each transformer block is
// captured once (its second step) and replayed after; the images are the CPU's bits; a LoRA weight
// change between generations is recaptured, never replayed stale; model offload (the transformer moved
// back to the host after each generation) recaptures where the weights land.
#include <gtest/gtest.h>

#include "pipeline_test_util.h"
#include "placement_test_util.h"

namespace diffq {
namespace {

const std::filesystem::path kFixtures = "tests/fixtures";

struct Case {
  const char* folder;
  bool video;
};
class DeviceGraphsPipeline : public ::testing::TestWithParam<Case> {};

TEST_P(DeviceGraphsPipeline, EachBlockCapturedOnceAndReplayedWithTheCpusBits) {
  GenerateParams g = testing::small_call(GetParam().video);
  g.num_inference_steps = 4;
  const auto folder = kFixtures / GetParam().folder;
  const GenerateResult cpu = testing::run_on_cpu(folder, g);
  testing::FakeDevice dev;
  {
    PipelineOptions po;
    po.dtype = DType::f32;
    po.device = Device::cuda(0);
    auto pipe = DiffusionPipeline::from_pretrained(folder, po);
    pipe->compile("regional", /*autotune=*/false, /*reduce_overhead=*/true);
    const GenerateResult r = pipe->generate(g);
    EXPECT_EQ(testing::rel_err(r.latents, cpu.latents), 0.0);
    const auto rep = pipe->compile_report();
    EXPECT_GT(rep.device_graphs, 0);
    EXPECT_EQ(rep.device_graph_refused, 0) << rep.device_graph_refusal;
    // Every block: one warm-up (step 1, with CFG's calls per step it may be more), one capture, replays after.
    EXPECT_EQ(rep.device_graphs, rep.device_graph_warmups);
    EXPECT_GE(rep.device_graph_replays, 2 * rep.device_graphs);
    EXPECT_EQ(dev.captures(), rep.device_graphs);
    // A second generation replays the same graphs: no new capture, the same bits.
    const GenerateResult again = pipe->generate(g);
    EXPECT_EQ(testing::rel_err(again.latents, cpu.latents), 0.0);
    EXPECT_EQ(pipe->compile_report().device_graphs, rep.device_graphs);
  }
  EXPECT_EQ(dev.live_bytes(), 0);
}

INSTANTIATE_TEST_SUITE_P(Models, DeviceGraphsPipeline,
                         ::testing::Values(Case{"tiny-flux", false}, Case{"tiny-wan", true}),
                         [](const auto& info) { return std::string(info.param.video ? "Wan" : "Flux"); });

std::unique_ptr<DiffusionPipeline> with_lora(Device device, bool graphs) {
  PipelineOptions po;
  po.dtype = DType::f32;
  po.device = device;
  auto pipe = DiffusionPipeline::from_pretrained(kFixtures / "tiny-flux", po);
  pipe->load_lora(kFixtures / "lora" / "peft_a.safetensors", "a");
  pipe->set_adapters({"a"}, {0.7});
  if (graphs) pipe->compile("regional", false, true);
  return pipe;
}

TEST(DeviceGraphsPipelineLora, AnAdapterWeightChangeIsRecapturedNotReplayedStale) {
  GenerateParams g = testing::small_call(false);
  g.num_inference_steps = 3;
  auto cpu = with_lora(Device::cpu(), false);
  const GenerateResult cpu_a = cpu->generate(g);
  cpu->set_adapters({"a"}, {-0.5});
  const GenerateResult cpu_b = cpu->generate(g);
  ASSERT_GT(testing::rel_err(cpu_a.latents, cpu_b.latents), 1e-4);  // the weight matters
  testing::FakeDevice dev;
  {
    auto pipe = with_lora(Device::cuda(0), true);
    EXPECT_EQ(testing::rel_err(pipe->generate(g).latents, cpu_a.latents), 0.0);
    const int64_t captured = pipe->compile_report().device_graphs;
    EXPECT_GT(captured, 0);
    pipe->set_adapters({"a"}, {-0.5});
    EXPECT_EQ(testing::rel_err(pipe->generate(g).latents, cpu_b.latents), 0.0);
    EXPECT_GT(pipe->compile_report().device_graphs, captured);
  }
  EXPECT_EQ(dev.live_bytes(), 0);
}

// Model offload and block-level group offload upload before a block's call: graphs keyed by where the
// weights landed, the CPU's bits; leaf offload uploads inside the call: refused, run eagerly, same bits.
TEST(DeviceGraphsPipelineOffload, OffloadedPipelinesRunWithGraphsAsOnTheCpu) {
  GenerateParams g = testing::small_call(false);
  g.num_inference_steps = 3;
  const GenerateResult cpu = testing::run_on_cpu(kFixtures / "tiny-flux", g);
  for (const char* mode : {"model", "group:1", "leaf"}) {
    testing::FakeDevice dev;
    {
      PipelineOptions po;
      po.dtype = DType::f32;
      po.device = Device::cuda(0);
      auto pipe = DiffusionPipeline::from_pretrained(kFixtures / "tiny-flux", po);
      pipe->enable_offload(mode);
      pipe->compile("regional", false, true);
      for (int i = 0; i < 2; ++i)
        EXPECT_EQ(testing::rel_err(pipe->generate(g).latents, cpu.latents), 0.0) << mode << " generation " << i;
      const auto rep = pipe->compile_report();
      if (std::string(mode) == "leaf") {
        EXPECT_EQ(rep.device_graphs, 0) << mode;
        EXPECT_GT(rep.device_graph_refused, 0) << mode;
        EXPECT_NE(rep.device_graph_refusal.find("cannot be part of a captured graph"), std::string::npos)
            << rep.device_graph_refusal;
      } else {
        EXPECT_GT(rep.device_graphs, 0) << mode;
        EXPECT_GT(rep.device_graph_replays, rep.device_graphs) << mode;
        EXPECT_EQ(rep.device_graph_refused, 0) << mode << ": " << rep.device_graph_refusal;
      }
    }
    EXPECT_EQ(dev.live_bytes(), 0) << mode;
  }
}

}  // namespace
}  // namespace diffq
