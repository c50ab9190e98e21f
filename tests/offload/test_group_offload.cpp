// Group offloading (block_level / leaf_level, host or hash-keyed disk home, with and without prefetch)
// gives bit-identical outputs to no offloading, records the execution order on the first pass and
// replays it with prefetch afterwards.
#include <gtest/gtest.h>

#include "offload/group_offloader.h"
#include "offload_test_util.h"

namespace {

using namespace offload_test;
using diffq::offload::GroupOffloader;
using diffq::offload::GroupOffloadOptions;
using diffq::offload::OffloadType;

struct Mode {
  const char* name;
  OffloadType type;
  int64_t n;
  bool disk, stream;
};

class GroupOffloadModes : public ::testing::TestWithParam<Mode> {};

TEST_P(GroupOffloadModes, TransformerOutputBitIdentical) {
  const Mode m = GetParam();
  ScratchDir dir(m.name);
  auto ref_pipe = tiny_pipe(false);
  const auto ref = (*ref_pipe)(embeds_call());

  auto pipe = tiny_pipe(false);
  GroupOffloadOptions o;
  o.offload_type = m.type;
  if (m.type == OffloadType::block_level) o.num_blocks_per_group = m.n;
  o.use_stream = m.stream;
  if (m.disk) o.offload_to_disk_path = dir.path;
  auto e = GroupOffloader::apply(*pipe->transformer, o);
  const auto got = (*pipe)(embeds_call());
  expect_same_output(got, ref);

  const auto s = e->stats();
  EXPECT_EQ(s.passes, 2);  // two denoising steps
  EXPECT_TRUE(e->order_recorded());
  for (const auto& g : e->groups()) {
    EXPECT_FALSE(g->onloaded) << g->id();
    for (const auto& [name, p] : g->params())
      EXPECT_EQ(p->residency(), m.disk ? diffq::Residency::disk : diffq::Residency::mmap) << name;
  }
  if (m.disk) {
    EXPECT_EQ(s.files_written, int64_t(e->groups().size()));
    EXPECT_EQ(dir.count_files(), e->groups().size());
    EXPECT_GT(s.disk_bytes_read, 0);
    // Only the current and (with prefetch) the next group are onloaded at once.
    EXPECT_LE(s.max_onloaded_groups, m.stream ? 2 : 1);
    EXPECT_GE(s.max_onloaded_groups, 1);
  }
  if (m.stream && m.disk) {
    // Pass 2 replays the recorded order: every non-resident onload is served by a prefetch.
    EXPECT_EQ(s.prefetched_onloads, int64_t(e->execution_order().size()));
    EXPECT_EQ(s.out_of_order, 0);
    EXPECT_EQ(s.prefetches_dropped, 0);
  } else {
    EXPECT_EQ(s.prefetched_onloads, 0);
  }
  // Removing the offloading brings the bytes back into host memory and keeps the output.
  e->remove();
  for (const auto& [name, p] : pipe->transformer->named_parameters())
    EXPECT_NE(p->residency(), diffq::Residency::disk) << name;
  expect_same_output((*pipe)(embeds_call()), ref);
}

INSTANTIATE_TEST_SUITE_P(
    Offload, GroupOffloadModes,
    ::testing::Values(Mode{"block1_host", OffloadType::block_level, 1, false, false},
                      Mode{"block1_disk_sync", OffloadType::block_level, 1, true, false},
                      Mode{"block1_disk_prefetch", OffloadType::block_level, 1, true, true},
                      Mode{"block2_disk_prefetch", OffloadType::block_level, 2, true, true},
                      Mode{"leaf_disk_sync", OffloadType::leaf_level, 0, true, false},
                      Mode{"leaf_disk_prefetch", OffloadType::leaf_level, 0, true, true}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(GroupOffload, BlockLevelGroupsFollowDiffusersIds) {
  auto pipe = tiny_pipe(false);
  GroupOffloadOptions o;
  o.num_blocks_per_group = 1;
  auto e = GroupOffloader::apply(*pipe->transformer, o);
  std::vector<std::string> ids;
  for (const auto& g : e->groups()) ids.push_back(g->id());
  EXPECT_EQ(ids, (std::vector<std::string>{"transformer_blocks_0_0", "transformer_blocks_1_1",
                                           "single_transformer_blocks_0_0", "single_transformer_blocks_1_1",
                                           "FluxTransformer2DModel_unmatched_group"}));
  EXPECT_EQ(e->resident_group(), 4);
  // Every parameter belongs to exactly one group.
  size_t n = 0;
  for (const auto& g : e->groups()) n += g->params().size();
  EXPECT_EQ(n, pipe->transformer->named_parameters().size());
}

TEST(GroupOffload, PrefetchOrderRecordedAndReplayed) {
  ScratchDir dir("order");
  auto pipe = tiny_pipe(false);
  GroupOffloadOptions o;
  o.num_blocks_per_group = 1;
  o.use_stream = true;
  o.offload_to_disk_path = dir.path;
  auto e = GroupOffloader::apply(*pipe->transformer, o);
  e->trace_events = true;
  (*pipe)(embeds_call());
  std::vector<std::string> order;
  for (int g : e->execution_order()) order.push_back(e->groups()[size_t(g)]->id());
  EXPECT_EQ(order, (std::vector<std::string>{"transformer_blocks_0_0", "transformer_blocks_1_1",
                                             "single_transformer_blocks_0_0", "single_transformer_blocks_1_1"}));
  const std::vector<std::string> pass1 = {
      "onload FluxTransformer2DModel_unmatched_group",
      "onload transformer_blocks_0_0",        "offload transformer_blocks_0_0",
      "onload transformer_blocks_1_1",        "offload transformer_blocks_1_1",
      "onload single_transformer_blocks_0_0", "offload single_transformer_blocks_0_0",
      "onload single_transformer_blocks_1_1", "offload single_transformer_blocks_1_1",
      "offload FluxTransformer2DModel_unmatched_group"};
  const std::vector<std::string> pass2 = {
      "prefetch transformer_blocks_0_0",      "onload FluxTransformer2DModel_unmatched_group",
      "onload transformer_blocks_0_0",        "prefetch transformer_blocks_1_1",
      "offload transformer_blocks_0_0",       "onload transformer_blocks_1_1",
      "prefetch single_transformer_blocks_0_0", "offload transformer_blocks_1_1",
      "onload single_transformer_blocks_0_0", "prefetch single_transformer_blocks_1_1",
      "offload single_transformer_blocks_0_0", "onload single_transformer_blocks_1_1",
      "offload single_transformer_blocks_1_1", "offload FluxTransformer2DModel_unmatched_group"};
  std::vector<std::string> expected = pass1;
  expected.insert(expected.end(), pass2.begin(), pass2.end());
  EXPECT_EQ(e->events, expected);
}

TEST(GroupOffload, OutOfOrderGroupLoadsSynchronously) {
  ScratchDir dir("ooo");
  ToyModel ref(4), toy(4);
  const Tensor x = Tensor::full({2, 16}, 0.5, diffq::DType::f32);
  GroupOffloadOptions o;
  o.num_blocks_per_group = 1;
  o.use_stream = true;
  o.offload_to_disk_path = dir.path;
  auto e = GroupOffloader::apply(toy, o);
  const std::vector<int> a = {0, 1, 2, 3}, b = {0, 2, 1, 3};
  EXPECT_TRUE(bit_identical(toy(x, a), ref(x, a)));  // records 0,1,2,3
  EXPECT_TRUE(bit_identical(toy(x, a), ref(x, a)));  // replays with prefetch
  auto s = e->stats();
  EXPECT_EQ(s.out_of_order, 0);
  EXPECT_EQ(s.prefetched_onloads, 4);
  EXPECT_TRUE(bit_identical(toy(x, b), ref(x, b)));  // 2 before 1: a synchronous fallback
  s = e->stats();
  EXPECT_GE(s.out_of_order, 1);
  EXPECT_GE(s.sync_onloads, 4 + 1);
  EXPECT_GE(s.prefetches_dropped, 1);  // block 1 was prefetched when block 2 came
  EXPECT_TRUE(bit_identical(toy(x, a), ref(x, a)));  // the recorded order still serves
  EXPECT_EQ(e->execution_order(), (std::vector<int>{0, 1, 2, 3}));
}

TEST(GroupOffload, BlockCalledOutsideTheRootStillComputesRightly) {
  ScratchDir dir("outside");
  ToyModel ref(3), toy(3);
  const Tensor x = Tensor::full({1, 16}, -0.25, diffq::DType::f32);
  GroupOffloadOptions o;
  o.num_blocks_per_group = 1;
  o.offload_to_disk_path = dir.path;
  auto e = GroupOffloader::apply(toy, o);
  EXPECT_TRUE(bit_identical(toy.blocks[1](x), ref.blocks[1](x)));
  // The unmatched group's Linear read outside a root pass: served from the file's mapping.
  EXPECT_TRUE(bit_identical(toy.head(x), ref.head(x)));
  EXPECT_EQ(toy.head.weight.residency(), diffq::Residency::disk);
}

}  // namespace
