// Compile with group offloading on the tiny FLUX transformer, weights offloaded to disk so the bytes
// really move: block-level groups with regional compile (the block hooks run around each compiled
// block), leaf-level groups with full compile (every hooked layer is an opaque node that runs its
// hooks), and full compile with block-level hooks (not capturable: an Error with fullgraph).
#include <gtest/gtest.h>

#include <filesystem>
#include <unistd.h>

#include "compile/compiled_module.h"
#include "compile_test_util.h"
#include "diffq/error.h"
#include "io/safetensors.h"
#include "models/flux/flux_transformer.h"
#include "offload/group_offloader.h"

using namespace diffq;
using namespace diffq::compile;
using compile_test::max_rel;
using models::flux::FluxTransformer2DModel;

namespace {

const std::filesystem::path kDev = std::filesystem::path(DIFFQ_SOURCE_DIR) / "tests/fixtures/tiny-flux";

struct Scratch {
  std::filesystem::path path;
  explicit Scratch(const std::string& n)
      : path(std::filesystem::temp_directory_path() / ("diffq-compile-" + n + "-" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~Scratch() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

Tensor run(FluxTransformer2DModel& m) {
  static const auto ref = io::SafetensorsFile::open(kDev / "reference/transformer_forward.safetensors");
  return m(ref.tensor("in.hidden_states"), ref.tensor("in.encoder_hidden_states"), ref.tensor("in.pooled_projections"),
           ref.tensor("in.timestep"), ref.tensor("in.guidance"), ref.tensor("in.txt_ids"), ref.tensor("in.img_ids"));
}

const Tensor& eager_out() {
  static const Tensor t = [] {
    auto m = FluxTransformer2DModel::from_pretrained(kDev / "transformer");
    return run(*m);
  }();
  return t;
}

}  // namespace

TEST(CompileOffload, BlockLevelDiskOffloadWithRegionalCompile) {
  Scratch dir("block");
  auto m = FluxTransformer2DModel::from_pretrained(kDev / "transformer");
  offload::GroupOffloadOptions o;
  o.num_blocks_per_group = 1;
  o.offload_to_disk_path = dir.path;
  auto e = offload::GroupOffloader::apply(*m, o);
  CompileOptions co;
  co.fullgraph = true;
  m->compile_repeated_blocks(co);
  for (int pass = 0; pass < 2; ++pass) EXPECT_LE(max_rel(run(*m), eager_out()), 1e-5) << pass;
  EXPECT_GT(e->stats().disk_bytes_read, 0);
  for (const auto& g : e->groups()) EXPECT_FALSE(g->onloaded) << g->id();
}

TEST(CompileOffload, LeafLevelDiskOffloadWithFullCompile) {
  Scratch dir("leaf");
  auto m = FluxTransformer2DModel::from_pretrained(kDev / "transformer");
  offload::GroupOffloadOptions o;
  o.offload_type = offload::OffloadType::leaf_level;
  o.offload_to_disk_path = dir.path;
  auto e = offload::GroupOffloader::apply(*m, o);
  CompileOptions co;
  co.fullgraph = true;
  m->compile(co);
  for (int pass = 0; pass < 2; ++pass) EXPECT_LE(max_rel(run(*m), eager_out()), 1e-5) << pass;
  EXPECT_GT(e->stats().disk_bytes_read, 0);
  EXPECT_EQ(m->compiled_modules()[0]->stats().captures, 1);
  EXPECT_GT(m->compiled_modules()[0]->stats().last_passes.opaque_nodes, 0);
}

TEST(CompileOffload, FullCompileWithBlockHooksIsAnErrorNotAWrongResult) {
  Scratch dir("full-block");
  auto m = FluxTransformer2DModel::from_pretrained(kDev / "transformer");
  offload::GroupOffloadOptions o;
  o.num_blocks_per_group = 1;
  o.offload_to_disk_path = dir.path;
  auto e = offload::GroupOffloader::apply(*m, o);
  CompileOptions co;
  co.fullgraph = true;
  m->compile(co);
  try {
    run(*m);
    FAIL() << "expected an Error";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("transformer_blocks.0"), std::string::npos) << err.what();
  }
  m->compile(CompileOptions{});  // lenient: that signature runs eagerly
  EXPECT_LE(max_rel(run(*m), eager_out()), 1e-5);
  EXPECT_EQ(m->compiled_modules()[0]->stats().eager_fallbacks, 1);
}
