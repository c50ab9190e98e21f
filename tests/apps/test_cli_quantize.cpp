// `diffq quantize` writes a pre-quantized pipeline folder; `diffq generate -m <it>` then needs no
// quantization flags and gives exactly what quantizing while loading gives.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <tuple>

#include "cli_test_util.h"
#include "io/safetensors.h"

namespace {

namespace fs = std::filesystem;

using Result = diffq::testing::CliResult;
using diffq::testing::run_cli;

class CliQuantize : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    std::string n = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    for (char& c : n)
      if (c == '/') c = '_';
    dir_ = fs::temp_directory_path() / ("diffq-cliq-" + n);
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

const std::string kModel = DIFFQ_SOURCE_DIR "/tests/fixtures/tiny-flux";
const std::string kGen = "generate -p 'a red fox' --steps 2 --width 32 --height 32 --output-type latent --json ";

std::vector<float> latents(const fs::path& f) {
  return diffq::io::SafetensorsFile::open(f).tensor("latents").to_f32_vector();
}

TEST_P(CliQuantize, SavedFolderGeneratesWhatOnTheFlyQuantizationGives) {
  const std::string q = GetParam();
  const Result w = run_cli(dir_, "quantize -m '" + kModel + "' -o q --quant " + q +
                                     " --dtype float32 --quantize transformer,text_encoder_2");
  ASSERT_EQ(w.status, 0) << w.out;
  // The quantized components carry a quantization_config; the others are copied unchanged.
  std::ifstream tc(dir_ / "q/transformer/config.json");
  EXPECT_TRUE(nlohmann::json::parse(tc).contains("quantization_config"));
  std::ifstream vc(dir_ / "q/vae/config.json");
  EXPECT_FALSE(nlohmann::json::parse(vc).contains("quantization_config"));
  EXPECT_TRUE(fs::exists(dir_ / "q/tokenizer_2"));
  EXPECT_LT(fs::file_size(dir_ / "q/transformer/diffusion_pytorch_model.safetensors"),
            fs::file_size(kModel + "/transformer/diffusion_pytorch_model.safetensors"));

  const Result pre = run_cli(dir_, kGen + "-m q -o pre.safetensors");
  ASSERT_EQ(pre.status, 0) << pre.out;
  const auto j = nlohmann::json::parse(pre.out);
  EXPECT_NE(j.at("quantization").at("transformer").get<std::string>().find("pre-quantized"), std::string::npos);
  const Result fly = run_cli(dir_, kGen + "-m '" + kModel + "' -o fly.safetensors --quant " + q +
                                       " --quantize transformer,text_encoder_2");
  ASSERT_EQ(fly.status, 0) << fly.out;
  EXPECT_EQ(latents(dir_ / "pre.safetensors"), latents(dir_ / "fly.safetensors")) << q;
  const Result plain = run_cli(dir_, kGen + "-m '" + kModel + "' -o plain.safetensors");
  ASSERT_EQ(plain.status, 0) << plain.out;
  EXPECT_NE(latents(dir_ / "plain.safetensors"), latents(dir_ / "pre.safetensors")) << q;
}

INSTANTIATE_TEST_SUITE_P(Schemes, CliQuantize,
                         ::testing::Values("nf4", "fp4", "int8", "int8wo", "int8dq", "fp8wo", "quanto-int8",
                                           "quanto-int4"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n)
                             if (c == '-') c = '_';
                           return n;
                         });

// --report: per-layer weight SQNR in the range each scheme's precision implies for Gaussian-like
// weights (4-bit NF4 ~ 20 dB, int8 per row ~ 40 dB), and the latent error of a short generation.
TEST(CliQuantizeReport, SqnrPerLayerAndOutputError) {
  const fs::path dir = fs::temp_directory_path() / "diffq-cliq-report";
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const auto& [q, lo, hi] : {std::tuple{"nf4", 15.0, 26.0}, std::tuple{"int8wo", 35.0, 50.0}}) {
    const Result r = run_cli(dir, "quantize -m '" + kModel + "' -o " + q + " --quant " + q +
                                      " --quantize transformer --dtype float32 --report --report-size 32");
    ASSERT_EQ(r.status, 0) << r.out;
    int layers = 0;
    std::istringstream in(r.out);
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("| transformer | ", 0) != 0 || line.find("(lowest)") != std::string::npos) continue;
      const double db = std::stod(line.substr(line.rfind('|', line.size() - 2) + 1));
      EXPECT_GE(db, lo) << q << ": " << line;
      EXPECT_LE(db, hi) << q << ": " << line;
      ++layers;
    }
    EXPECT_EQ(layers, 50) << q << ": one row per quantized Linear of the tiny transformer\n" << r.out;
    EXPECT_NE(r.out.find("final latents vs unquantized"), std::string::npos) << r.out;
  }
  fs::remove_all(dir);
}

TEST(CliQuantizeErrors, RefusesAndLeavesNothingBehind) {
  const fs::path dir = fs::temp_directory_path() / "diffq-cliq-errors";
  fs::remove_all(dir);
  fs::create_directories(dir / "exists");
  Result r = run_cli(dir, "quantize -m '" + kModel + "' -o exists --quant nf4");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("already exists"), std::string::npos) << r.out;
  r = run_cli(dir, "quantize -m '" + kModel + "' -o g --quant q4_0 --quantize transformer");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("gguf"), std::string::npos) << r.out;
  r = run_cli(dir, "quantize -m '" + kModel + "' -o n");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("--quant"), std::string::npos) << r.out;
  r = run_cli(dir, "quantize -m '" + kModel + "' -o b --quant nf4 --quant-config x.json");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("not both"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(dir / "g") || fs::exists(dir / "n") || fs::exists(dir / "b") ||
               fs::exists(dir / "g.tmp-diffq"));
  fs::remove_all(dir);
}

}  // namespace
