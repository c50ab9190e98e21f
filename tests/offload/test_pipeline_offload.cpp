// Pipeline-level offloading on FluxPipeline: model CPU offload (hook chain in model_cpu_offload_seq
// order), sequential CPU offload, group offload with exclude_modules; bit-identical outputs; the
// conflicting combinations give Diffusers' errors.
#include <gtest/gtest.h>

#include "diffq/error.h"
#include "offload/offload_options.h"
#include "offload_test_util.h"

namespace {

using namespace offload_test;
using diffq::Device;
using diffq::offload::GroupOffloadOptions;
using diffq::offload::OffloadType;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const diffq::Error& e) {
    return e.what();
  }
  return "";
}

TEST(ModelCpuOffload, ChainsComponentsInSequenceOrder) {
  auto ref_pipe = tiny_pipe();
  const auto ref = (*ref_pipe)(text_call());
  for (bool disk : {false, true}) {
    SCOPED_TRACE(disk ? "disk home" : "host home");
    ScratchDir dir("model");
    auto pipe = tiny_pipe();
    pipe->enable_model_cpu_offload(Device::cpu(), disk ? dir.path : std::filesystem::path());
    auto chain = pipe->offloader.model_chain();
    ASSERT_TRUE(chain);
    expect_same_output((*pipe)(text_call()), ref);
    // Diffusers: k-1 goes home when k starts; the transformer stays through the loop; everything
    // goes home at the end of the call (maybe_free_model_hooks).
    const std::vector<std::string> expected = {"onload text_encoder",   "offload text_encoder", "onload text_encoder_2",
                                               "offload text_encoder_2", "onload transformer",  "offload transformer",
                                               "onload vae",             "offload vae"};
    EXPECT_EQ(chain->events(), expected);
    for (const char* c : {"text_encoder", "text_encoder_2", "transformer", "vae"}) EXPECT_FALSE(chain->is_onloaded(c));
    for (const auto& [n, p] : pipe->transformer->named_parameters())
      EXPECT_EQ(p->residency(), disk ? diffq::Residency::disk : diffq::Residency::mmap) << n;
    if (disk) {
      EXPECT_EQ(dir.count_files(), 4u);
      // One component at a time: the largest onloaded set is one component.
      int64_t largest = 0;
      for (const auto& g : chain->groups()) largest = std::max(largest, int64_t(g->packed_bytes()));
      EXPECT_EQ(chain->max_onloaded_bytes(), largest);
    }
    // A second call repeats the chain from the start.
    expect_same_output((*pipe)(text_call()), ref);
    EXPECT_EQ(chain->events().size(), 2 * expected.size());
    pipe->remove_all_hooks();
    expect_same_output((*pipe)(text_call()), ref);
  }
}

TEST(SequentialCpuOffload, LeafGroupsBitIdentical) {
  auto ref_pipe = tiny_pipe();
  const auto ref = (*ref_pipe)(text_call());
  ScratchDir dir("seq");
  auto pipe = tiny_pipe();
  pipe->enable_sequential_cpu_offload(Device::cpu(), dir.path);
  expect_same_output((*pipe)(text_call()), ref);
  const auto& gs = pipe->offloader.group_offloaders();
  ASSERT_EQ(gs.size(), 4u);
  for (const auto& [name, g] : gs) {
    EXPECT_EQ(g->kind(), diffq::offload::OffloadKind::sequential) << name;
    EXPECT_LE(g->stats().max_onloaded_groups, 2) << name;  // a leaf, and at most its parent's loose params
    EXPECT_EQ(g->stats().prefetches, 0) << name;
  }
}

TEST(PipelineGroupOffload, ExcludeModulesStayOut) {
  auto ref_pipe = tiny_pipe();
  const auto ref = (*ref_pipe)(text_call());
  ScratchDir dir("pipe-group");
  auto pipe = tiny_pipe();
  GroupOffloadOptions o;
  o.num_blocks_per_group = 1;
  o.use_stream = true;
  o.offload_to_disk_path = dir.path;
  pipe->enable_group_offload(o, {"vae", "not_a_component"});
  const auto& gs = pipe->offloader.group_offloaders();
  EXPECT_EQ(gs.size(), 3u);
  EXPECT_FALSE(gs.count("vae"));
  EXPECT_EQ(diffq::offload::active_offload(*pipe->vae), std::nullopt);
  expect_same_output((*pipe)(text_call()), ref);
}

TEST(OffloadErrors, ConflictingModesGiveDiffusersErrors) {
  auto pipe = tiny_pipe(false);
  GroupOffloadOptions block;
  block.num_blocks_per_group = 1;

  // Invalid options.
  GroupOffloadOptions no_n;
  EXPECT_NE(error_of([&] { pipe->enable_group_offload(no_n); }).find("`num_blocks_per_group` must be provided"),
            std::string::npos);
  GroupOffloadOptions rec = block;
  rec.record_stream = true;
  EXPECT_NE(error_of([&] { pipe->enable_group_offload(rec); }).find("`record_stream` cannot be True"),
            std::string::npos);
  GroupOffloadOptions stream_cpu = block;
  stream_cpu.use_stream = true;
  EXPECT_NE(error_of([&] { pipe->enable_group_offload(stream_cpu); }).find("Using streams for data transfer requires"),
            std::string::npos);
  EXPECT_NE(error_of([] { diffq::offload::parse_offload_type("block"); }).find("is not a valid GroupOffloadingType"),
            std::string::npos);
  GroupOffloadOptions zero = block;
  zero.num_blocks_per_group = 0;
  EXPECT_NE(error_of([&] { pipe->enable_group_offload(zero); }).find("num_blocks_per_group must be >= 1"),
            std::string::npos);
  EXPECT_EQ(diffq::offload::active_offload(*pipe->transformer), std::nullopt);  // nothing half-applied

  // No accelerator on this machine, no device given.
  if (!diffq::offload::default_accelerator()) {
    EXPECT_NE(error_of([&] { pipe->enable_model_cpu_offload(); }).find("`enable_model_cpu_offload` requires accelerator"),
              std::string::npos);
    EXPECT_NE(error_of([&] { pipe->enable_sequential_cpu_offload(); })
                  .find("`enable_sequential_cpu_offload` requires accelerator"),
              std::string::npos);
  }

  // Group offload on, then model / sequential: refused.
  pipe->enable_group_offload(block);
  const std::string group_active = "with group offloading enabled. This is not supported.";
  EXPECT_NE(error_of([&] { pipe->enable_model_cpu_offload(Device::cpu()); }).find(group_active), std::string::npos);
  EXPECT_NE(error_of([&] { pipe->enable_sequential_cpu_offload(Device::cpu()); }).find(group_active),
            std::string::npos);
  EXPECT_NE(error_of([&] { pipe->enable_group_offload(block); }).find("already has group offloading"),
            std::string::npos);
  pipe->remove_all_hooks();

  // Model / sequential on, then group: refused (Accelerate's message).
  const std::string accel = "already applying an alternative offloading strategy from Accelerate";
  pipe->enable_model_cpu_offload(Device::cpu());
  EXPECT_NE(error_of([&] { pipe->enable_group_offload(block); }).find(accel), std::string::npos);
  pipe->enable_sequential_cpu_offload(Device::cpu());  // replaces model offload, as Diffusers
  EXPECT_EQ(pipe->offloader.model_chain(), nullptr);
  EXPECT_NE(error_of([&] { pipe->enable_group_offload(block); }).find(accel), std::string::npos);
  // The engine-level check too: a tree with sequential hooks refuses group offloading.
  EXPECT_NE(error_of([&] { diffq::offload::GroupOffloader::apply(*pipe->transformer, block); }).find(accel),
            std::string::npos);
  pipe->remove_all_hooks();
  EXPECT_EQ(diffq::offload::active_offload(*pipe->transformer), std::nullopt);
  pipe->enable_group_offload(block);  // fine once everything is removed
}

}  // namespace
