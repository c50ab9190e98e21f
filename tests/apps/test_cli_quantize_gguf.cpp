// `diffq quantize --format gguf`: the FLUX transformer as one BFL-named GGUF file (the bytes that
// tools/reference/check_flux_gguf.py verified with gguf-py and Diffusers), which `diffq generate
// --transformer` then loads; and the flag errors.
#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_test_util.h"
#include "common/sha256.h"
#include "io/safetensors.h"

namespace {

namespace fs = std::filesystem;
using diffq::testing::run_cli;

const std::string kModel = DIFFQ_SOURCE_DIR "/tests/fixtures/tiny-flux";
const fs::path kChecks = DIFFQ_SOURCE_DIR "/tests/fixtures/tiny-flux-gguf";
const std::string kGen = "generate -p 'a red fox' --steps 2 --width 32 --height 32 --output-type latent ";

class CliQuantizeGGUF : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("diffq-cliqg-" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

std::vector<float> latents(const fs::path& f) {
  return diffq::io::SafetensorsFile::open(f).tensor("latents").to_f32_vector();
}

TEST_F(CliQuantizeGGUF, WritesTheCheckedFileAndGenerateLoadsIt) {
  for (const char* type : {"q8_0", "q4_K"}) {
    const std::string out = std::string("t-") + type + ".gguf";
    const auto w = run_cli(dir_, "quantize -m '" + kModel + "' -o " + out + " --format gguf --type " + type +
                                     " --dtype float32 --quantize transformer");
    ASSERT_EQ(w.status, 0) << w.out;
    EXPECT_NE(w.out.find("84 tensors"), std::string::npos) << w.out;
    std::string tag = type;
    for (char& c : tag) c = char(std::tolower(static_cast<unsigned char>(c)));
    std::ifstream in(kChecks / ("written_" + tag + "_check.json"));
    const auto j = nlohmann::json::parse(in);
    EXPECT_TRUE(j["ok"].get<bool>());
    EXPECT_EQ(diffq::testing::sha256_file(dir_ / out), j["sha256"].get<std::string>()) << type;
  }
  const auto g = run_cli(dir_, kGen + "-m '" + kModel + "' --transformer t-q8_0.gguf -o g.safetensors --json");
  ASSERT_EQ(g.status, 0) << g.out;
  // --json names the transformer's GGUF schemes (the file's quantization, not a pipeline config).
  const std::string label = nlohmann::json::parse(g.out.substr(g.out.find('{')))["quantization"]["transformer"];
  EXPECT_NE(label.find("gguf_q8_0 x"), std::string::npos) << label;
  EXPECT_NE(label.find("pre-quantized, t-q8_0.gguf"), std::string::npos) << label;
  const auto plain = run_cli(dir_, kGen + "-m '" + kModel + "' -o plain.safetensors");
  ASSERT_EQ(plain.status, 0) << plain.out;
  const auto a = latents(dir_ / "g.safetensors"), b = latents(dir_ / "plain.safetensors");
  ASSERT_EQ(a.size(), b.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_TRUE(std::isfinite(a[i]));
    num = std::max(num, std::abs(double(a[i]) - b[i]));
    den = std::max(den, std::abs(double(b[i])));
  }
  EXPECT_GT(num, 0.0);          // the Q8_0 weights were used
  EXPECT_LT(num / den, 5e-2);   // and are close to the unquantized ones
}

TEST_F(CliQuantizeGGUF, FlagErrors) {
  const std::string q = "quantize -m '" + kModel + "' --format gguf ";
  struct Case {
    std::string args, message;
  };
  std::ofstream(dir_ / "exists.gguf") << "x";
  for (const Case& c : {Case{q + "-o a.gguf --type q9_Z", "--type 'q9_Z' is not a GGUF type"},
                        Case{q + "-o a.gguf", "--format gguf needs --type"},
                        Case{q + "-o a.gguf --type q8_0 --quantize vae", "writes only the FLUX transformer; 'vae'"},
                        Case{q + "-o a.gguf --type q8_0 --quant nf4", "takes --type, not --quant"},
                        Case{q + "-o a --type q8_0", "writes a .gguf file"},
                        Case{q + "-o exists.gguf --type q8_0", "already exists"},
                        Case{"quantize -m '" + kModel + "' -o a.gguf --format ggml --type q8_0", "--format must be"}}) {
    const auto r = run_cli(dir_, c.args);
    EXPECT_NE(r.status, 0) << c.args;
    EXPECT_NE(r.out.find(c.message), std::string::npos) << c.args << "\n" << r.out;
  }
  EXPECT_FALSE(fs::exists(dir_ / "a.gguf"));
  EXPECT_FALSE(fs::exists(dir_ / "a"));
}

}  // namespace
