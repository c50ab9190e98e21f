// `diffq generate --lora FILE[:scale]` / `--lora-lenient` / `--fuse-lora` and `diffq bench ... +lora` as a user runs
// them: the built binary on the tiny FLUX and Wan pipelines, against Diffusers + PEFT's outputs with the same
// adapters (tests/fixtures/lora, tests/fixtures/lora-wan) and against the public API's own run in this process.
#include <gtest/gtest.h>

#include "common/latent_call.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_test_util.h"
#include "diffq/pipeline.h"
#include "io/safetensors.h"

namespace {

namespace fs = std::filesystem;
using diffq::testing::max_rel;
using diffq::testing::run_cli;
using diffq::testing::run_cli_env;

const std::string kFix = DIFFQ_SOURCE_DIR "/tests/fixtures/";
const std::string kLora = kFix + "lora/";
const std::string kWanLora = kFix + "lora-wan/";

nlohmann::json cases(const std::string& dir) {
  std::ifstream in(dir + "cases.json");
  return nlohmann::json::parse(in);
}
std::vector<float> ref(const std::string& dir, const char* key) {
  return diffq::io::SafetensorsFile::open(dir + "latents.safetensors").tensor(key).to_f32_vector();
}
std::vector<float> latents(const fs::path& f) {
  return diffq::io::SafetensorsFile::open(f).tensor("latents").to_f32_vector();
}

// The fixture's call as CLI arguments (latent output).
std::string call_args(const nlohmann::json& c) {
  std::string s = "generate -p '" + c.at("prompt").get<std::string>() + "' --steps " +
                  std::to_string(c.at("num_inference_steps").get<int>()) + " --width " +
                  std::to_string(c.at("width").get<int>()) + " --height " + std::to_string(c.at("height").get<int>()) +
                  " --guidance " + std::to_string(c.at("guidance_scale").get<double>()) + " --seed " +
                  std::to_string(c.at("seed").get<int>()) + " --max-sequence-length " +
                  std::to_string(c.at("max_sequence_length").get<int>()) + " --output-type latent ";
  if (c.contains("num_frames")) s += "--frames " + std::to_string(c.at("num_frames").get<int>()) + " ";
  return s;
}

class CliLora : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("diffq-cli-lora-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(CliLora, TwoLorasWithScalesEqualDiffusersAndTheApiPath) {
  const auto c = cases(kLora).at("call");
  const auto r = run_cli_env(dir_, "", call_args(c) + "-m '" + kFix + "tiny-flux' -o two.safetensors --json --lora '" + kLora +
                                           "peft_a.safetensors:0.7' --lora '" + kLora + "peft_b_alpha.safetensors:-0.4'",
                             /*stdout_only=*/true);
  ASSERT_EQ(r.status, 0) << r.out;
  const auto got = latents(dir_ / "two.safetensors");
  EXPECT_LE(max_rel(got, ref(kLora, "two")), 1e-4);  // Diffusers: set_adapters(["a", "b"], [0.7, -0.4])
  const auto j = nlohmann::json::parse(r.out).at("lora");
  ASSERT_EQ(j.at("adapters").size(), 2u) << j.dump();
  EXPECT_EQ(j.at("adapters")[0].at("name"), "peft_a");
  EXPECT_EQ(j.at("adapters")[0].at("weight"), 0.7);
  EXPECT_EQ(j.at("adapters")[1].at("name"), "peft_b_alpha");
  EXPECT_EQ(j.at("adapters")[1].at("weight"), -0.4);
  EXPECT_EQ(j.at("fused"), false);

  // The same through the public API in this process: the same latents.
  auto p = diffq::DiffusionPipeline::from_pretrained(kFix + "tiny-flux", {.dtype = diffq::DType::f32});
  p->load_lora(kLora + "peft_a.safetensors", "peft_a", 0.7);
  p->load_lora(kLora + "peft_b_alpha.safetensors", "peft_b_alpha", -0.4);
  p->set_adapters({"peft_a", "peft_b_alpha"}, {0.7, -0.4});
  EXPECT_LE(max_rel(got, p->generate(diffq::testing::latent_call(c)).latents.to_f32_vector()), 1e-6);

  // --fuse-lora: the same adapters merged into the weights; the JSON says so.
  const auto f = run_cli_env(dir_, "", call_args(c) + "-m '" + kFix + "tiny-flux' -o fused.safetensors --json --fuse-lora --lora '" + kLora +
                                           "peft_a.safetensors:0.7' --lora '" + kLora + "peft_b_alpha.safetensors:-0.4'",
                             true);
  ASSERT_EQ(f.status, 0) << f.out;
  EXPECT_EQ(nlohmann::json::parse(f.out).at("lora").at("fused"), true);
  EXPECT_LE(max_rel(latents(dir_ / "fused.safetensors"), ref(kLora, "two")), 1e-4);
}

TEST_F(CliLora, EachFormatAloneEqualsDiffusers) {
  const auto c = cases(kLora).at("call");
  for (const char* name : {"peft_a", "comfy", "xlabs"}) {
    const std::string out = std::string(name) + ".safetensors";
    const auto r = run_cli(dir_, call_args(c) + "-m '" + kFix + "tiny-flux' -o " + out + " --lora '" + kLora + name + ".safetensors'");
    ASSERT_EQ(r.status, 0) << r.out;
    EXPECT_LE(max_rel(latents(dir_ / out), ref(kLora, name)), 1e-4) << name;
  }
}

TEST_F(CliLora, BadFilesAreClearErrorsAndLenientWarns) {
  const std::string base = "generate -m '" + kFix + "tiny-flux' -p x --steps 1 --width 32 --height 32 -o o.png ";
  auto r = run_cli(dir_, base + "--lora missing.safetensors");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("missing.safetensors: no such file"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(dir_ / "o.png"));
  // Not a safetensors file.
  std::ofstream(dir_ / "junk.safetensors") << "not a safetensors file";
  r = run_cli(dir_, base + "--lora junk.safetensors");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("junk.safetensors"), std::string::npos) << r.out;
  // LoKr: refused naming why.
  r = run_cli(dir_, base + "--lora '" + kLora + "lokr.safetensors'");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("LoKr"), std::string::npos) << r.out;
  // Keys that match nothing: an error listing them that names --lora-lenient ...
  r = run_cli(dir_, base + "--lora '" + kLora + "unknown.safetensors'");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("transformer.transformer_blocks.0.attn.to_zz.lora_A.weight"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--lora-lenient"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(dir_ / "o.png"));
  // ... and with it, a warning and an image.
  r = run_cli(dir_, base + "--lora '" + kLora + "unknown.safetensors' --lora-lenient");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("[lora] warning"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("to_zz"), std::string::npos) << r.out;
  EXPECT_TRUE(fs::exists(dir_ / "o.png"));
  // A scale that is not a number is part of the file name, which does not exist.
  r = run_cli(dir_, base + "--lora '" + kLora + "peft_a.safetensors:x'");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("no such file"), std::string::npos) << r.out;
  r = run_cli(dir_, base + "--fuse-lora");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("--fuse-lora needs --lora"), std::string::npos) << r.out;
}

TEST_F(CliLora, WanOriginalNamingEqualsDiffusers) {
  const auto c = cases(kWanLora).at("call");
  const auto r = run_cli(dir_, call_args(c) + "-m '" + kFix + "tiny-wan' -o w.safetensors --lora '" + kWanLora +
                                   "original.safetensors'");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_LE(max_rel(latents(dir_ / "w.safetensors"), ref(kWanLora, "original")), 1e-4);
  // Wan2.2: --lora-2 loads into the low-noise expert (Diffusers' load_into_transformer_2).
  const auto c22 = cases(kWanLora).at("call22");
  const auto r2 = run_cli(dir_, call_args(c22) + "--guidance-2 " + std::to_string(c22.at("guidance_scale_2").get<double>()) +
                                    " -m '" + kFix + "tiny-wan22' -o w22.safetensors --lora-2 '" + kWanLora + "peft.safetensors'");
  ASSERT_EQ(r2.status, 0) << r2.out;
  EXPECT_LE(max_rel(latents(dir_ / "w22.safetensors"), ref(kWanLora, "wan22_t2")), 1e-4);
}

TEST_F(CliLora, BenchLoraCombinationsReportTheirAdapters) {
  const auto r = run_cli(dir_, "bench -m '" + kFix + "tiny-flux' --combos 'fp32+lora; bf16+nf4+lora; fp32+lora+compile' --lora '" +
                                   kLora + "peft_a.safetensors:0.5' --steps 1 --size 32x32 --repeat 1 --warmup 0 --threads 1 --json");
  ASSERT_EQ(r.status, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out.substr(r.out.find("[\n")));
  ASSERT_EQ(j.size(), 3u);
  for (const auto& row : j) {
    ASSERT_EQ(row.at("lora").size(), 1u) << row.dump();
    EXPECT_EQ(row.at("lora")[0].at("name"), "peft_a");
    EXPECT_EQ(row.at("lora")[0].at("weight"), 0.5);
  }
  EXPECT_EQ(j[2].at("compile"), "regional");
  // +lora without --lora: refused before any worker runs.
  const auto e = run_cli(dir_, "bench -m '" + kFix + "tiny-flux' --combos 'fp32; fp32+lora' --steps 1 --size 32x32");
  EXPECT_NE(e.status, 0);
  EXPECT_NE(e.out.find("give --lora"), std::string::npos) << e.out;
}

}  // namespace
