// The seeds' video recipe from the command line: `diffq generate -m <wan folder> --quant nf4 --quantize
// transformer,text_encoder --offload leaf --compile regional --stats` writes the video and reports the peak memory;
// with --output-type latent the final latents are Diffusers' nf4 latents (tests/fixtures/wan-quantized, made by
// tools/reference/make_wan_quantized.py).
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "cli_test_util.h"
#include "io/safetensors.h"

namespace {

namespace fs = std::filesystem;
using diffq::testing::max_rel;
using diffq::testing::run_cli;

const std::string kFix = DIFFQ_SOURCE_DIR "/tests/fixtures/wan-quantized";
// cases.json's call: prompt, 32x32, 5 frames, 2 steps, CFG 5, seed 0, 16 tokens.
const std::string kCall =
    "-p 'A photo of a Cat sitting on a RED chair, 4k!!' --width 32 --height 32 --frames 5 --steps 2 "
    "--guidance 5 --seed 0 --max-sequence-length 16 ";
const std::string kRecipe = "--quant nf4 --quantize transformer,text_encoder --offload leaf --compile regional --stats ";

// The "stats: peak allocator (cpu) X MiB" figure (-1 when absent).
double peak_mib(const std::string& out) {
  const std::string key = "stats: peak allocator (cpu) ";
  const size_t at = out.find(key);
  if (at == std::string::npos) return -1;
  return std::stod(out.substr(at + key.size()));
}

class CliWanQuantized : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("diffq-cliwq-" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(CliWanQuantized, RecipeWritesTheVideoAndReportsThePeak) {
  const auto r = run_cli(dir_, "generate -m '" + kFix + "/pipeline' " + kCall + kRecipe + "-o x.mp4");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(fs::exists(dir_ / "x.mp4"));
  EXPECT_GT(fs::file_size(dir_ / "x.mp4"), 100u);
  EXPECT_NE(r.out.find("quantized transformer: bitsandbytes_4bit nf4"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("quantized text_encoder: bitsandbytes_4bit nf4"), std::string::npos) << r.out;
  // The same run without offloading / compilation peaks higher (the allocator's peak, load included).
  const auto plain = run_cli(dir_, "generate -m '" + kFix + "/pipeline' " + kCall +
                                       "--quant nf4 --quantize transformer,text_encoder --stats -o y.mp4");
  ASSERT_EQ(plain.status, 0) << plain.out;
  const double peak = peak_mib(r.out), plain_peak = peak_mib(plain.out);
  std::printf("[cli recipe] peak allocator %.2f MiB (without --offload / --compile %.2f MiB)\n", peak, plain_peak);
  EXPECT_GT(peak, 0.0) << r.out;
  EXPECT_LT(peak, plain_peak);
}

TEST_F(CliWanQuantized, RecipeLatentsAreDiffusersNf4Latents) {
  const auto r =
      run_cli(dir_, "generate -m '" + kFix + "/pipeline' " + kCall + kRecipe + "--output-type latent -o x.safetensors");
  ASSERT_EQ(r.status, 0) << r.out;
  const auto got = diffq::io::SafetensorsFile::open(dir_ / "x.safetensors").tensor("latents").to_f32_vector();
  const auto ref = diffq::io::SafetensorsFile::open(kFix + "/latents.safetensors");
  const double e = max_rel(got, ref.tensor("nf4").to_f32_vector());
  std::printf("[cli recipe] vs Diffusers nf4 latents: %.3g (vs unquantized %.3g)\n", e,
              max_rel(got, ref.tensor("none").to_f32_vector()));
  EXPECT_LE(e, 1e-6);  // test_wan_quantized.cpp's nf4 bound
}

}  // namespace
