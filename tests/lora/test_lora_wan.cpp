// Wan LoRAs through the public DiffusionPipeline against Diffusers + PEFT (tests/fixtures/lora-wan, made by
// tools/reference/make_wan_lora_fixtures.py on tests/fixtures/tiny-wan and tiny-wan22): the Diffusers/PEFT file
// and the original/ComfyUI-named file (converted key by key as Diffusers converts it), two adapters with weights,
// fused and unfused, and Wan2.2's load_into_transformer_2.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "common/error_of.h"
#include "diffq/pipeline.h"
#include "io/safetensors.h"
#include "lora/lora_file.h"
#include "pipelines/pipeline_test_util.h"

namespace {

using diffq::Tensor;
using diffq::testing::rel_err;

const std::string kFix = DIFFQ_SOURCE_DIR "/tests/fixtures/";
const std::string kDir = kFix + "lora-wan/";
constexpr double kTol = 1e-4;  // fp32 vs Diffusers + PEFT: max |d| / max |ref|

const nlohmann::json& cases() {
  static const nlohmann::json j = [] {
    std::ifstream in(kDir + "cases.json");
    return nlohmann::json::parse(in);
  }();
  return j;
}
const diffq::io::SafetensorsFile& ref() {
  static const auto f = diffq::io::SafetensorsFile::open(kDir + "latents.safetensors");
  return f;
}

std::unique_ptr<diffq::DiffusionPipeline> pipe(const char* folder) {
  return diffq::DiffusionPipeline::from_pretrained(kFix + folder, {.dtype = diffq::DType::f32});
}

Tensor run(diffq::DiffusionPipeline& p, const char* call = "call") {
  const auto& c = cases().at(call);
  diffq::GenerateParams g;
  g.prompt = c.at("prompt");
  g.height = c.at("height");
  g.width = c.at("width");
  g.num_frames = c.at("num_frames");
  g.num_inference_steps = c.at("num_inference_steps");
  g.guidance_scale = c.at("guidance_scale").get<double>();
  if (c.contains("guidance_scale_2")) g.guidance_scale_2 = c.at("guidance_scale_2").get<double>();
  g.max_sequence_length = c.at("max_sequence_length");
  g.seed = c.at("seed");
  g.output_latents_only = true;
  return p.generate(g).latents;
}

class WanLoraFormats : public ::testing::TestWithParam<const char*> {};

TEST_P(WanLoraFormats, OutputMatchesDiffusers) {
  const std::string name = GetParam();
  auto p = pipe("tiny-wan");
  EXPECT_EQ(p->load_lora(kDir + name + ".safetensors", name), name);
  const double e = rel_err(run(*p), ref().tensor(name));
  const double moved = rel_err(ref().tensor(name), ref().tensor("none"));
  std::printf("[wan %s] vs Diffusers: %.3g (the adapter moves the output by %.3g)\n", name.c_str(), e, moved);
  EXPECT_LE(e, kTol);
  EXPECT_GT(moved, 1e-2);
}
INSTANTIATE_TEST_SUITE_P(Formats, WanLoraFormats, ::testing::Values("peft", "original"));

TEST(WanLora, OriginalNamingConvertedKeyByKeyAsDiffusers) {
  diffq::lora::LoraModelInfo info;
  info.family = "wan";
  const auto conv = diffq::lora::read_lora_file(kDir + "original.safetensors", info);
  const auto want = diffq::io::SafetensorsFile::open(kDir + "original_converted.safetensors");
  std::set<std::string> ours, theirs;
  for (const auto& [k, v] : conv.tensors) ours.insert(k);
  for (const auto& n : want.names()) theirs.insert(n);
  EXPECT_EQ(ours, theirs);
  for (const auto& n : want.names()) {
    if (!conv.tensors.count(n)) continue;
    ASSERT_EQ(conv.tensors.at(n).shape(), want.tensor(n).shape()) << n;
    EXPECT_EQ(conv.tensors.at(n).to_f32_vector(), want.tensor(n).to_f32_vector()) << n;  // bit for bit
  }
  ASSERT_FALSE(conv.notes.empty());  // the zero norm .diff keys, dropped as Diffusers drops them
  EXPECT_NE(conv.notes[0].find("norm3.diff"), std::string::npos) << conv.notes[0];
}

TEST(WanLora, TwoAdaptersWithWeightsFusedAndUnfused) {
  auto p = pipe("tiny-wan");
  const auto& two = cases().at("two");
  const auto names = two.at("names").get<std::vector<std::string>>();
  p->load_lora(kDir + "peft.safetensors", names[0]);
  p->load_lora(kDir + "original.safetensors", names[1]);
  p->set_adapters(names, two.at("weights").get<std::vector<double>>());
  const Tensor unfused = run(*p);
  EXPECT_LE(rel_err(unfused, ref().tensor("two")), kTol);
  EXPECT_TRUE(p->fuse_lora(cases().at("fuse_scale").get<double>()).empty());  // dense: everything fused
  EXPECT_TRUE(p->lora_fused());
  EXPECT_LE(rel_err(run(*p), ref().tensor("fused")), kTol);
  p->unfuse_lora();
  EXPECT_EQ(rel_err(run(*p), unfused), 0.0);  // the original weights are back, bit for bit
}

TEST(WanLora, Wan22LoadIntoTransformer2) {
  auto p = pipe("tiny-wan22");
  EXPECT_LE(rel_err(run(*p, "call22"), ref().tensor("wan22_none")), kTol);
  p->load_lora(kDir + "peft.safetensors", "t2", 1.0, false, false, /*load_into_transformer_2=*/true);
  ASSERT_EQ(p->loras().size(), 1u);
  EXPECT_EQ(p->loras()[0].component, "transformer_2");
  EXPECT_LE(rel_err(run(*p, "call22"), ref().tensor("wan22_t2")), kTol);
  // Wan2.1 has no transformer_2: a clear error.
  auto w21 = pipe("tiny-wan");
  const std::string e = diffq::testing::error_of(
      [&] { w21->load_lora(kDir + "peft.safetensors", "x", 1.0, false, false, true); });
  EXPECT_NE(e.find("transformer_2"), std::string::npos) << e;
}

TEST(WanLora, MusubiNamingIsRefusedNamingTheKeys) {
  std::map<std::string, Tensor> sd;
  sd["lora_unet_blocks_0_self_attn_q.lora_down.weight"] = Tensor::zeros({2, 24}, diffq::DType::f32);
  diffq::lora::LoraModelInfo info;
  info.family = "wan";
  const std::string e = diffq::testing::error_of([&] { diffq::lora::convert_lora_state_dict(sd, info, "m.safetensors"); });
  EXPECT_NE(e.find("musubi"), std::string::npos) << e;
  EXPECT_NE(e.find("lora_unet_blocks_0_self_attn_q"), std::string::npos) << e;
}

}  // namespace
