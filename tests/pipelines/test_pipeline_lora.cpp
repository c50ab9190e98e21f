// LoRA adapters through the public API (include/diffq/pipeline.h: load_lora, set_adapters, fuse_lora, unfuse_lora,
// unload_lora, loras) on the tiny FLUX pipeline, against Diffusers + PEFT (tests/fixtures/lora, made by
// tools/reference/make_lora_fixtures.py): the same outputs as the engine tests reach, the fuse/unfuse round trip
// bit-exact, unload back to the base pipeline, and a hotswap after compile() equal to eager.
#include <gtest/gtest.h>

#include "common/latent_call.h"

#include <fstream>
#include <nlohmann/json.hpp>

#include "common/error_of.h"
#include "diffq/pipeline.h"
#include "io/safetensors.h"
#include "pipelines/pipeline_test_util.h"

namespace {

using diffq::Tensor;
using diffq::testing::rel_err;

const std::string kFix = DIFFQ_SOURCE_DIR "/tests/fixtures/";
const std::string kLora = kFix + "lora/";
constexpr double kTol = 1e-4;

const nlohmann::json& cases() {
  static const nlohmann::json j = [] {
    std::ifstream in(kLora + "cases.json");
    return nlohmann::json::parse(in);
  }();
  return j;
}
Tensor ref(const char* key) {
  static const auto f = diffq::io::SafetensorsFile::open(kLora + "latents.safetensors");
  return f.tensor(key);
}

std::unique_ptr<diffq::DiffusionPipeline> tiny() {
  return diffq::DiffusionPipeline::from_pretrained(kFix + "tiny-flux", {.dtype = diffq::DType::f32});
}

Tensor run(diffq::DiffusionPipeline& p) {
  const auto& c = cases().at("call");
  return p.generate(diffq::testing::latent_call(c)).latents;
}

TEST(PipelineLora, LoadSetAdaptersFuseUnfuseUnload) {
  auto p = tiny();
  EXPECT_EQ(p->load_lora(kLora + "peft_a.safetensors", "a"), "a");
  EXPECT_LE(rel_err(run(*p), ref("peft_a")), kTol);
  EXPECT_EQ(p->load_lora(kLora + "peft_b_alpha.safetensors"), "default_1");  // Diffusers' default names
  p->set_adapters({"a", "default_1"}, {0.7, -0.4});
  const auto l = p->loras();
  ASSERT_EQ(l.size(), 2u);
  EXPECT_EQ(l[0].name, "a");
  EXPECT_EQ(l[0].weight, 0.7);
  EXPECT_EQ(l[1].weight, -0.4);
  EXPECT_TRUE(l[0].active && l[1].active);
  const Tensor unfused = run(*p);
  EXPECT_LE(rel_err(unfused, ref("two")), kTol);

  EXPECT_TRUE(p->fuse_lora(cases().at("fuse_scale").get<double>()).empty());
  EXPECT_TRUE(p->lora_fused());
  EXPECT_LE(rel_err(run(*p), ref("fused")), kTol);
  const std::string e = diffq::testing::error_of([&] { p->load_lora(kLora + "peft_a.safetensors", "c"); });
  EXPECT_NE(e.find("unfuse_lora first"), std::string::npos) << e;
  p->unfuse_lora();
  EXPECT_FALSE(p->lora_fused());
  EXPECT_EQ(rel_err(run(*p), unfused), 0.0);  // bit-exact: the original weights themselves come back

  p->set_adapters({"a"});  // default_1 inactive
  EXPECT_FALSE(p->loras()[1].active);
  EXPECT_LE(rel_err(run(*p), ref("peft_a")), kTol);
  p->unload_lora("a");
  p->unload_lora("default_1");
  EXPECT_TRUE(p->loras().empty());
  EXPECT_LE(rel_err(run(*p), ref("none")), kTol);
  const std::string e2 = diffq::testing::error_of([&] { p->set_adapters({"a"}); });
  EXPECT_NE(e2.find("no adapter named 'a'"), std::string::npos) << e2;
}

TEST(PipelineLora, HotswapAfterCompileEqualsEager) {
  auto p = tiny();
  p->load_lora(kLora + "peft_a.safetensors", "x");
  p->load_lora(kLora + "peft_b_alpha.safetensors", "y");  // every layer either touches has its slot at compile
  p->set_adapters({"x"});
  p->compile("full");
  EXPECT_LE(rel_err(run(*p), ref("peft_a")), kTol);
  const auto graphs = p->compile_report().graphs;
  EXPECT_GE(graphs, 1);
  p->unload_lora("y");
  p->load_lora(kLora + "peft_b_alpha.safetensors", "x", 1.0, false, /*hotswap=*/true);
  EXPECT_EQ(p->loras().at(0).file, kLora + "peft_b_alpha.safetensors");
  EXPECT_LE(rel_err(run(*p), ref("peft_b_alpha")), kTol);
  EXPECT_EQ(p->compile_report().graphs, graphs);  // no recompile
  // A file touching layers that had no LoRA when compiling: refused, naming them.
  auto q = tiny();
  q->load_lora(kLora + "peft_a.safetensors", "a");
  q->compile("regional");
  const std::string e = diffq::testing::error_of([&] { q->load_lora(kLora + "peft_b_alpha.safetensors", "b"); });
  EXPECT_NE(e.find("norm_out.linear"), std::string::npos) << e;
}

TEST(PipelineLora, BadFilesAreClearErrors) {
  auto p = tiny();
  std::string e = diffq::testing::error_of([&] { p->load_lora(kLora + "nope.safetensors"); });
  EXPECT_NE(e.find("nope.safetensors"), std::string::npos) << e;
  e = diffq::testing::error_of([&] { p->load_lora(kLora + "unknown.safetensors", "u"); });
  EXPECT_NE(e.find("to_zz"), std::string::npos) << e;
  EXPECT_TRUE(p->loras().empty());
  p->load_lora(kLora + "unknown.safetensors", "u", 1.0, /*lenient=*/true);
  ASSERT_EQ(p->loras().size(), 1u);
  ASSERT_EQ(p->loras()[0].warnings.size(), 1u);
  EXPECT_NE(p->loras()[0].warnings[0].find("to_zz"), std::string::npos);
  e = diffq::testing::error_of([&] { p->load_lora(kLora + "peft_a.safetensors", "u"); });
  EXPECT_NE(e.find("already loaded"), std::string::npos) << e;
  e = diffq::testing::error_of([&] { p->load_lora(kLora + "peft_a.safetensors", "v", 1.0, false, false, true); });
  EXPECT_NE(e.find("transformer_2"), std::string::npos) << e;  // FLUX has no second transformer
}

}  // namespace
