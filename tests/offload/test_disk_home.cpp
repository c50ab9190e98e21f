// The disk home: files keyed by a content hash (a changed weight or config gets a new file; a file
// whose bytes no longer match its key is detected and rewritten, never loaded), atomic writes, and
// quantized weights travelling packed.
#include <gtest/gtest.h>

#include <fstream>

#include "offload/content_hash.h"
#include "offload/group_offloader.h"
#include "offload_test_util.h"
#include "quant/torchao/torchao.h"

namespace {

using namespace offload_test;
using diffq::offload::GroupOffloader;
using diffq::offload::GroupOffloadOptions;

GroupOffloadOptions disk_opts(const std::filesystem::path& dir) {
  GroupOffloadOptions o;
  o.num_blocks_per_group = 1;
  o.use_stream = true;
  o.offload_to_disk_path = dir;
  return o;
}

TEST(ContentHash, StreamingEqualsOneShotAndSeesEveryByte) {
  std::vector<uint8_t> data(1000);
  for (size_t i = 0; i < data.size(); ++i) data[i] = uint8_t(i * 7 + 3);
  diffq::offload::ContentHasher h;
  h.update(data.data(), 5);
  h.update(data.data() + 5, 100);
  h.update(data.data() + 105, data.size() - 105);
  EXPECT_EQ(h.digest(), diffq::offload::content_hash(data.data(), data.size()));
  const auto base = diffq::offload::content_hash(data.data(), data.size());
  for (size_t i : {size_t(0), size_t(15), size_t(16), size_t(999)}) {
    auto d = data;
    d[i] ^= 1;
    EXPECT_FALSE(diffq::offload::content_hash(d.data(), d.size()) == base) << i;
  }
  EXPECT_FALSE(diffq::offload::content_hash(data.data(), 999) == base);  // length matters
  EXPECT_EQ(base.hex().size(), 32u);
}

TEST(DiskHome, FilesAreReusedWhenFreshAndReplacedWhenStale) {
  ScratchDir dir("stale");
  auto ref_pipe = tiny_pipe(false);
  const auto ref = (*ref_pipe)(embeds_call());
  size_t n_groups = 0;
  std::vector<std::filesystem::path> files;
  {
    auto pipe = tiny_pipe(false);
    auto e = GroupOffloader::apply(*pipe->transformer, disk_opts(dir.path));
    n_groups = e->groups().size();
    EXPECT_EQ(e->stats().files_written, int64_t(n_groups));
    for (const auto& g : e->groups())
      files.push_back(dynamic_cast<diffq::offload::DiskHome&>(g->home()).file());
  }
  for (const auto& f : files) EXPECT_NE(f.filename().string().find("group_"), std::string::npos);
  // No temporary files left behind.
  EXPECT_EQ(dir.count_files(), n_groups);
  {  // same weights: every file reused
    auto pipe = tiny_pipe(false);
    auto e = GroupOffloader::apply(*pipe->transformer, disk_opts(dir.path));
    EXPECT_EQ(e->stats().files_reused, int64_t(n_groups));
    EXPECT_EQ(e->stats().files_written, 0);
    expect_same_output((*pipe)(embeds_call()), ref);
  }
  // Corrupt one file in place (same name, same size): detected by the content hash and rewritten.
  {
    std::fstream f(files[0], std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-8, std::ios::end);
    const char junk[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    f.write(junk, 8);
  }
  {
    auto pipe = tiny_pipe(false);
    auto e = GroupOffloader::apply(*pipe->transformer, disk_opts(dir.path));
    const auto s = e->stats();
    EXPECT_EQ(s.stale_files_replaced, 1);
    EXPECT_EQ(s.files_reused, int64_t(n_groups) - 1);
    expect_same_output((*pipe)(embeds_call()), ref);
    EXPECT_EQ(diffq::offload::DiskHome::stale_reason(files[0], *e->groups()[0],
                                                     dynamic_cast<diffq::offload::DiskHome&>(e->groups()[0]->home()).key(), ""),
              "");
  }
  // A changed weight: its group gets a new file (the old one is never loaded); the others are reused.
  {
    auto pipe = tiny_pipe(false);
    auto& w = pipe->transformer->transformer_blocks[0].attn.to_q.weight;
    Tensor changed = w.dense().clone();
    changed.data<float>()[0] += 1.0f;
    w.set(changed, diffq::Residency::host);
    auto e = GroupOffloader::apply(*pipe->transformer, disk_opts(dir.path));
    EXPECT_EQ(e->stats().files_written, 1);
    EXPECT_EQ(e->stats().files_reused, int64_t(n_groups) - 1);
    EXPECT_EQ(dir.count_files(), n_groups + 1);
    auto& home = dynamic_cast<diffq::offload::DiskHome&>(e->groups()[0]->home());
    EXPECT_NE(home.file(), files[0]);
    // The old file is stale for this group, and says why.
    EXPECT_NE(diffq::offload::DiskHome::stale_reason(files[0], *e->groups()[0], home.key(), ""), "");
    EXPECT_EQ(w.dense().data<float>()[0], changed.data<float>()[0]);
  }
  // A different config fingerprint keys different files too.
  {
    auto pipe = tiny_pipe(false);
    auto o = disk_opts(dir.path);
    o.config_fingerprint = "quantization: something else";
    auto e = GroupOffloader::apply(*pipe->transformer, o);
    EXPECT_EQ(e->stats().files_written, int64_t(n_groups));
  }
}

TEST(DiskHome, QuantizedGroupsTravelPacked) {
  ScratchDir dir("quant");
  auto quantize = [](diffq::FluxPipeline& p) {
    diffq::quant::torchao::Config cfg;
    cfg.kind = diffq::quant::torchao::Kind::Int8WeightOnly;
    for (auto& [name, m] : p.transformer->named_modules())
      if (auto* lin = dynamic_cast<diffq::Linear*>(m); lin && lin->in_features % 16 == 0)
        lin->weight.set(diffq::quant::torchao::quantize(lin->weight.dense(), cfg), diffq::Residency::host);
  };
  auto ref_pipe = tiny_pipe(false);
  quantize(*ref_pipe);
  const auto ref = (*ref_pipe)(embeds_call());
  auto pipe = tiny_pipe(false);
  int64_t dense_bytes = 0;
  for (const auto& [n, p] : pipe->transformer->named_parameters()) dense_bytes += int64_t(p->nbytes());
  quantize(*pipe);
  int64_t quant_bytes = 0, n_quantized = 0;
  for (const auto& [n, p] : pipe->transformer->named_parameters()) {
    quant_bytes += int64_t(p->nbytes());
    n_quantized += p->is_quantized();
  }
  ASSERT_GT(n_quantized, 0);
  auto e = GroupOffloader::apply(*pipe->transformer, disk_opts(dir.path));
  int64_t packed = 0;
  for (const auto& g : e->groups()) packed += int64_t(g->packed_bytes());
  // Packed = the quantized storages (plus alignment padding), far below the dense bytes.
  EXPECT_GE(packed, quant_bytes);
  EXPECT_LT(packed, quant_bytes + int64_t(64 * 200));
  EXPECT_LT(quant_bytes, dense_bytes / 2);
  expect_same_output((*pipe)(embeds_call()), ref);
  for (const auto& [n, p] : pipe->transformer->named_parameters())
    if (p->is_quantized()) EXPECT_EQ(p->residency(), diffq::Residency::disk) << n;
  // Each pass reads exactly the packed bytes of every group once.
  EXPECT_EQ(e->stats().disk_bytes_read, 2 * packed);
}

}  // namespace
