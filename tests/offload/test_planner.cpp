// The --offload spec parser, the size parser, and the memory-budget planner: the plan it picks fits
// the budget, and a run under that plan stays within the budget (allocator peak).
#include <gtest/gtest.h>

#include "diffq/error.h"
#include "diffq/memory.h"
#include "offload/planner.h"
#include "offload_test_util.h"

namespace {

using namespace offload_test;
using namespace diffq::offload;

TEST(OffloadSpec, ParsesEveryFormAndRejectsOthers) {
  EXPECT_EQ(parse_offload_spec("model").mode, OffloadMode::model);
  EXPECT_EQ(parse_offload_spec("sequential").mode, OffloadMode::sequential);
  EXPECT_EQ(parse_offload_spec("leaf").mode, OffloadMode::leaf);
  EXPECT_EQ(parse_offload_spec("none").mode, OffloadMode::none);
  const auto g = parse_offload_spec("group:3");
  EXPECT_EQ(g.mode, OffloadMode::group);
  EXPECT_EQ(g.blocks_per_group, 3);
  EXPECT_EQ(parse_offload_spec("group").blocks_per_group, 1);
  const auto d = parse_offload_spec("disk:/tmp/x y");
  EXPECT_EQ(d.mode, OffloadMode::disk);
  EXPECT_EQ(d.disk_path, "/tmp/x y");
  EXPECT_EQ(d.str(), "disk:/tmp/x y");
  EXPECT_EQ(parse_offload_spec("group:12").str(), "group:12");
  for (const char* bad : {"", "grup", "group:", "group:0", "group:-1", "group:2x", "disk:", "model:1", "leaf:2"})
    EXPECT_THROW(parse_offload_spec(bad), diffq::Error) << bad;
}

TEST(OffloadSpec, SizesParse) {
  EXPECT_EQ(parse_size("512M"), 512LL << 20);
  EXPECT_EQ(parse_size("8G"), 8LL << 30);
  EXPECT_EQ(parse_size("1.5GiB"), 3LL << 29);
  EXPECT_EQ(parse_size("750MB"), 750LL << 20);
  EXPECT_EQ(parse_size("4096"), 4096);
  EXPECT_EQ(parse_size("2k"), 2048);
  for (const char* bad : {"", "M", "12Q", "1..2G", "0"}) EXPECT_THROW(parse_size(bad), diffq::Error) << bad;
}

TEST(Planner, LadderOfBudgets) {
  ComponentFootprint t{"transformer", 1000, 100, 100, 9, 40, 50};
  ComponentFootprint v{"vae", 200, 200, 0, 0, 30, 300};
  const std::vector<ComponentFootprint> cs = {t, v};
  auto plan = [&](int64_t budget) { return plan_memory(cs, {.max_memory = budget}); };
  EXPECT_EQ(plan(1500).spec.mode, OffloadMode::none);   // 1200 + 300
  EXPECT_EQ(plan(1499).spec.mode, OffloadMode::model);  // max(1050, 500)
  const Plan g = plan(1049);
  EXPECT_EQ(g.spec.mode, OffloadMode::group);
  EXPECT_LE(g.predicted_peak, 1049);
  const Plan g1 = plan(700);
  EXPECT_EQ(g1.spec.mode, OffloadMode::group);
  EXPECT_LT(g1.spec.blocks_per_group, g.spec.blocks_per_group);
  EXPECT_EQ(plan(560).spec.mode, OffloadMode::leaf);
  EXPECT_THROW(plan(100), diffq::Error);
  for (int64_t budget : {1500, 1499, 1049, 900, 700, 560}) EXPECT_LE(plan(budget).predicted_peak, budget) << budget;
  EXPECT_NE(g.str().find("from disk"), std::string::npos);
  // GPU: host homes unless they exceed --max-host-memory.
  const Plan gpu = plan_memory(cs, {.max_memory = 700, .max_host_memory = 100, .device = diffq::Device::cuda(0)});
  EXPECT_EQ(gpu.spec.mode, OffloadMode::disk);
  const Plan gpu2 = plan_memory(cs, {.max_memory = 700, .device = diffq::Device::cuda(0)});
  EXPECT_EQ(gpu2.spec.mode, OffloadMode::group);
  EXPECT_EQ(gpu2.predicted_host, 1200);
}

TEST(Planner, RunUnderThePlanFitsTheBudget) {
  ScratchDir dir("plan");
  auto call = embeds_call();
  call.output_type = "latent";  // the transformer only
  // Activation peak of a no-offload run (the fixture's f32 weights are mmap'd, not allocated).
  auto ref_pipe = tiny_pipe(false);
  diffq::reset_peak_memory_stats(diffq::Device::cpu());
  const int64_t base = diffq::memory_stats(diffq::Device::cpu()).current_bytes;
  const auto ref = (*ref_pipe)(call);
  const int64_t act = diffq::memory_stats(diffq::Device::cpu()).peak_bytes - base;

  auto pipe = tiny_pipe(false);
  NamedModules comps = {{"transformer", pipe->transformer.get()}};
  auto fp = measure_footprints(comps);
  ASSERT_EQ(fp.size(), 1u);
  fp[0].activation_bytes = act;
  const int64_t budget = fp[0].weight_bytes * 6 / 10 + act;  // below the model: needs group offloading
  const Plan p = plan_memory(fp, {.max_memory = budget});
  std::printf("[planner] weights %lld, activations %lld, budget %lld -> %s\n", (long long)fp[0].weight_bytes,
              (long long)act, (long long)budget, p.str().c_str());
  ASSERT_TRUE(p.spec.mode == OffloadMode::group || p.spec.mode == OffloadMode::leaf) << p.str();
  EXPECT_LE(p.predicted_peak, budget);
  OffloadSpec spec = p.spec;
  spec.disk_path = dir.path;
  apply(pipe->offloader, comps, diffq::FluxPipeline::model_cpu_offload_seq, spec);
  diffq::reset_peak_memory_stats(diffq::Device::cpu());
  const int64_t base2 = diffq::memory_stats(diffq::Device::cpu()).current_bytes;
  const auto got = (*pipe)(call);
  const int64_t measured = diffq::memory_stats(diffq::Device::cpu()).peak_bytes - base2;
  std::printf("[planner] measured peak %lld (predicted %lld)\n", (long long)measured, (long long)p.predicted_peak);
  EXPECT_LE(measured, budget);
  EXPECT_TRUE(bit_identical(got.latents, ref.latents));
}

}  // namespace

// --max-memory on a GPU knows the device's free memory: "auto" is what it has available less a headroom;
// a larger size is clamped to the same bound (and the note says so); on the CPU "auto" is an error.
TEST(Planner, DeviceBudgetFromTheDevicesAvailableMemory) {
  const diffq::Device gpu = diffq::Device::cuda(0);
  const int64_t gib = int64_t(1) << 30;
  DeviceBudget a = device_budget("auto", gpu, 80 * gib);
  EXPECT_EQ(a.bytes, 80 * gib - 512 * (int64_t(1) << 20));  // a large card keeps 512 MiB free
  EXPECT_NE(a.note.find("auto: 80 GiB available on cuda:0, 512 MiB kept free"), std::string::npos) << a.note;
  EXPECT_EQ(device_budget("auto", gpu, 1000).bytes, 900);   // a small one keeps a tenth
  const DeviceBudget fits = device_budget("8GiB", gpu, 80 * gib);
  EXPECT_EQ(fits.bytes, 8 * gib);
  EXPECT_TRUE(fits.note.empty()) << fits.note;
  const DeviceBudget clamped = device_budget("100GiB", gpu, 80 * gib);
  EXPECT_EQ(clamped.bytes, a.bytes);
  EXPECT_NE(clamped.note.find("--max-memory 100GiB clamped to"), std::string::npos) << clamped.note;
  EXPECT_EQ(device_budget("100GiB", gpu, -1).bytes, 100 * gib);  // the device cannot tell: as given
  EXPECT_EQ(device_budget("2GiB", diffq::Device::cpu(), -1).bytes, 2 * gib);
  EXPECT_THROW(device_budget("auto", diffq::Device::cpu(), -1), diffq::Error);
  EXPECT_THROW(device_budget("auto", gpu, -1), diffq::Error);
}
