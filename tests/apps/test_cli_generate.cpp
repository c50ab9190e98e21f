// `diffq generate` as a user runs it: the built binary in a scratch folder, on the bundled tiny model.
// Checks the files it writes (PNG text chunks, latents), --json, batch naming, and that bad input
// is a clear error with a non-zero exit status and no output file.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "backend/device_interface.h"
#include "io/png.h"
#include "cli_test_util.h"
#include "io/safetensors.h"

namespace {
// The tiny random pipeline the Diffusers fixtures were made with (the default model is the demo model).
const std::string kTinyFlux = "'" DIFFQ_SOURCE_DIR "/tests/fixtures/tiny-flux'";

namespace fs = std::filesystem;

using Result = diffq::testing::CliResult;
using diffq::testing::max_rel;
using diffq::testing::run_cli;

class CliGenerate : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("diffq-cli-" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

std::map<std::string, std::string> text_map(const diffq::io::PngText& t) {
  std::map<std::string, std::string> m;
  for (const auto& [k, v] : t) m[k] = v;
  return m;
}

TEST_F(CliGenerate, ReadmeCommandWritesAPngWithItsParameters) {
  // The README's main command: the bundled demo model (models/demo-flux) at its own defaults
  // (generation_defaults.json: 64x64, 20 steps, 32 T5 tokens, true CFG 4 against "").
  const Result r = run_cli(dir_, "generate -p 'two red circles on the left on a white background' -o circles.png");
  ASSERT_EQ(r.status, 0) << r.out;
  ASSERT_TRUE(fs::exists(dir_ / "circles.png")) << r.out;
  const auto png = diffq::io::read_png(dir_ / "circles.png");
  EXPECT_EQ(png.width, 64);
  EXPECT_EQ(png.height, 64);
  const auto t = text_map(png.text);
  EXPECT_EQ(t.at("prompt"), "two red circles on the left on a white background");
  EXPECT_EQ(t.at("seed"), "0");
  EXPECT_EQ(t.at("steps"), "20");
  EXPECT_EQ(t.at("size"), "64x64");
  EXPECT_NE(t.at("model").find("demo-flux"), std::string::npos);
  EXPECT_EQ(t.at("software").rfind("diffq ", 0), 0u);
  EXPECT_NE(t.count("guidance"), 0u);
  // Not a terminal: no progress bar, one line saying what was written.
  EXPECT_EQ(r.out.find("step 1/20"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("wrote circles.png"), std::string::npos) << r.out;
  // Explicit options still win over the folder's defaults.
  const Result s = run_cli(dir_, "generate -p 'a red fox' -o fox.png --steps 2 --width 64 --height 48 --seed 5 --json");
  ASSERT_EQ(s.status, 0) << s.out;
  const auto fox = diffq::io::read_png(dir_ / "fox.png");
  EXPECT_EQ(fox.height, 48);
  EXPECT_EQ(text_map(fox.text).at("steps"), "2");
  // --json reports the folder's defaults that were used, not only the options given.
  const auto j = nlohmann::json::parse(s.out);
  EXPECT_EQ(j.at("steps"), 2);
  EXPECT_EQ(j.at("max_sequence_length"), 32);
  EXPECT_EQ(j.at("true_cfg"), 4.0);
}

TEST_F(CliGenerate, JsonSummaryBatchAndLatentsMatchTheLatentOutput) {
  const Result r = run_cli(dir_,
                           "generate -m " + kTinyFlux + " -p 'a cat' -n 'blurry' --true-cfg 2 --num-images 2 --steps 2 --width 32 "
                           "--height 32 --seed 9 -o cat.png --output-latents lat.safetensors --json");
  ASSERT_EQ(r.status, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.at("output"), nlohmann::json({"cat-0.png", "cat-1.png"}));
  EXPECT_EQ(j.at("num_images"), 2);
  EXPECT_EQ(j.at("steps"), 2);
  for (const char* k : {"load_s", "encode_prompt_s", "denoise_and_decode_s"}) EXPECT_GT(j.at("timings").at(k).get<double>(), 0.0) << k;
  EXPECT_GT(j.at("peak_cpu_bytes").get<int64_t>(), 0);
  EXPECT_GT(j.at("peak_rss_bytes").get<int64_t>(), j.at("peak_cpu_bytes").get<int64_t>() / 2);
  EXPECT_TRUE(fs::exists(dir_ / "cat-0.png") && fs::exists(dir_ / "cat-1.png"));
  EXPECT_EQ(text_map(diffq::io::read_png(dir_ / "cat-1.png").text).at("batch_index"), "1");
  const auto lat = diffq::io::SafetensorsFile::open(dir_ / "lat.safetensors").tensor("latents");
  EXPECT_EQ(lat.shape(), (diffq::Shape{2, 64, 16}));

  // --output-type latent (no VAE decode) writes the same latents for the same seed.
  const Result r2 = run_cli(dir_,
                            "generate -m " + kTinyFlux + " -p 'a cat' -n 'blurry' --true-cfg 2 --num-images 2 --steps 2 --width 32 "
                            "--height 32 --seed 9 --output-type latent -o only.safetensors");
  ASSERT_EQ(r2.status, 0) << r2.out;
  const auto only = diffq::io::SafetensorsFile::open(dir_ / "only.safetensors").tensor("latents");
  EXPECT_EQ(only.to_f32_vector(), lat.to_f32_vector());
}

// --sigmas (the step count comes from them) and --negative-2 reproduce Diffusers' call with sigmas and
// negative_prompt_2 (tests/fixtures/flux-pipeline-cases, case dev_custom_sigmas).
TEST_F(CliGenerate, CustomSigmasAndNegative2MatchDiffusers) {
  const Result r = run_cli(dir_,
                           "generate -m " + kTinyFlux + " -p 'a lighthouse at dusk' -n 'ugly' --negative-2 'ugly, blurry, washed-out colours' "
                           "--true-cfg 2 --sigmas '1.0, 0.8,0.55,0.3,0.1' --guidance 3 --seed 99 --width 48 --height 32 "
                           "--max-sequence-length 24 -o l.png --output-latents l.safetensors --json");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(nlohmann::json::parse(r.out).at("steps"), 5);
  const auto ref = diffq::io::SafetensorsFile::open(DIFFQ_SOURCE_DIR "/tests/fixtures/flux-pipeline-cases/cases.safetensors")
                       .tensor("dev_custom_sigmas.latents")
                       .to_f32_vector();
  const auto got = diffq::io::SafetensorsFile::open(dir_ / "l.safetensors").tensor("latents").to_f32_vector();
  ASSERT_EQ(got.size(), ref.size());
  double num = 0, den = 0;  // max |got - ref| / max |ref|, the pipeline tests' measure
  for (size_t i = 0; i < got.size(); ++i)
    num = std::max(num, double(std::abs(got[i] - ref[i]))), den = std::max(den, double(std::abs(ref[i])));
  EXPECT_LE(num / den, 1e-3);
  const auto t = text_map(diffq::io::read_png(dir_ / "l.png").text);
  EXPECT_EQ(t.at("steps"), "5");
  EXPECT_EQ(t.at("sigmas"), "1.0, 0.8,0.55,0.3,0.1");
  EXPECT_EQ(t.at("negative_prompt_2"), "ugly, blurry, washed-out colours");
}

TEST_F(CliGenerate, SingleFileTransformerGivesTheFolderImage) {
  const std::string common = "generate -m " + kTinyFlux + " -p 'x' --steps 1 --width 32 --height 32 --output-type latent ";
  ASSERT_EQ(run_cli(dir_, common + "-o a.safetensors").status, 0);
  const Result r = run_cli(dir_, common + "-o b.safetensors --transformer '" DIFFQ_SOURCE_DIR
                                          "/tests/fixtures/tiny-flux-single-file/flux1-tiny-dev.safetensors'");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(diffq::io::SafetensorsFile::open(dir_ / "a.safetensors").tensor("latents").to_f32_vector(),
            diffq::io::SafetensorsFile::open(dir_ / "b.safetensors").tensor("latents").to_f32_vector());
}

TEST_F(CliGenerate, OffloadModesAndMemoryBudgetGiveTheSameLatents) {
  const std::string common = "generate -m " + kTinyFlux + " -p 'a red fox' --steps 2 --width 32 --height 32 --output-type latent ";
  ASSERT_EQ(run_cli(dir_, common + "-o ref.safetensors").status, 0);
  const auto ref = diffq::io::SafetensorsFile::open(dir_ / "ref.safetensors").tensor("latents").to_f32_vector();
  int i = 0;
  for (const std::string mode : {"--offload model", "--offload sequential", "--offload group:1", "--offload leaf",
                                 "--offload disk:offload-files", "--offload disk --offload-drop-cache",
                                 "--max-memory 64MiB"}) {
    const std::string out = "o" + std::to_string(i++) + ".safetensors";
    const Result r = run_cli(dir_, common + "-o " + out + " --stats " + mode);
    ASSERT_EQ(r.status, 0) << mode << ": " << r.out;
    EXPECT_NE(r.out.find("peak RSS"), std::string::npos) << r.out;
    EXPECT_EQ(diffq::io::SafetensorsFile::open(dir_ / out).tensor("latents").to_f32_vector(), ref) << mode;
  }
  EXPECT_TRUE(fs::exists(dir_ / "offload-files"));  // the disk homes went where they were told
  const Result small = run_cli(dir_, common + "-o x.safetensors --max-memory 1MiB");
  EXPECT_NE(small.status, 0);
  EXPECT_NE(small.out.find("too small"), std::string::npos) << small.out;
  const Result both = run_cli(dir_, common + "-o x.safetensors --max-memory 1GiB --offload model");
  EXPECT_NE(both.status, 0);
  EXPECT_FALSE(fs::exists(dir_ / "x.safetensors"));
}

TEST_F(CliGenerate, BadInputIsAClearErrorAndWritesNothing) {
  struct Bad {
    std::string args, needle;
  };
  for (const Bad& b : {Bad{"--width 30", "multiples of 4"},
                       Bad{"--max-sequence-length 513", "513"},
                       Bad{"-m does-not-exist", "does-not-exist"},
                       Bad{"--dtype int8", "int8"},
                       Bad{"--output-type latent", ".safetensors"},
                       Bad{"--transformer missing.safetensors", "missing.safetensors"},
                       Bad{"--offload-drop-cache", "--offload-drop-cache needs --offload"},
                       Bad{"--offload model --offload-drop-cache", "not --offload model"},
                       Bad{"--sigmas 1,x", "'x'"},
                       Bad{"--sigmas 1,0.5", "--steps says 1"}}) {
    const std::string model = b.args.rfind("-m ", 0) == 0 ? "" : "-m " + kTinyFlux + " ";
    const Result r = run_cli(dir_, "generate " + model + "-p 'x' --steps 1 -o out.png " + b.args);
    EXPECT_NE(r.status, 0) << b.args;
    EXPECT_NE(r.out.find(b.needle), std::string::npos) << b.args << ": " << r.out;
    EXPECT_FALSE(fs::exists(dir_ / "out.png")) << b.args;
  }
  EXPECT_TRUE(fs::is_empty(dir_));  // no temp files left behind either
}

}  // namespace

// --compile full|regional: the final latents equal the eager run's within 1e-5 (relative to the max).
TEST_F(CliGenerate, CompiledTransformerGivesTheEagerLatents) {
  const std::string base = "generate -m " + kTinyFlux + " -p 'a cat' --steps 2 --width 32 --height 32 --seed 3 --output-type latent ";
  // A batch of two as well: regional compile's single blocks then copy their (non-contiguous) inputs.
  const Result batch = run_cli(dir_, base + "--num-images 2 -o eager2.safetensors");
  ASSERT_EQ(batch.status, 0) << batch.out;
  const Result batch_c = run_cli(dir_, base + "--num-images 2 --compile regional -o regional2.safetensors");
  ASSERT_EQ(batch_c.status, 0) << batch_c.out;
  EXPECT_LE(max_rel(diffq::io::SafetensorsFile::open(dir_ / "regional2.safetensors").tensor("latents").to_f32_vector(),
                    diffq::io::SafetensorsFile::open(dir_ / "eager2.safetensors").tensor("latents").to_f32_vector()),
            1e-5);
  const Result eager = run_cli(dir_, base + "-o eager.safetensors");
  ASSERT_EQ(eager.status, 0) << eager.out;
  const auto want = diffq::io::SafetensorsFile::open(dir_ / "eager.safetensors").tensor("latents").to_f32_vector();
  for (const char* mode : {"full", "regional"}) {
    const Result r = run_cli(dir_, base + "--compile " + mode + " -o " + mode + ".safetensors");
    ASSERT_EQ(r.status, 0) << r.out;
    EXPECT_EQ(r.out.find("runs eagerly"), std::string::npos) << r.out;  // really compiled
    const auto got =
        diffq::io::SafetensorsFile::open(dir_ / (std::string(mode) + ".safetensors")).tensor("latents").to_f32_vector();
    EXPECT_LE(max_rel(got, want), 1e-5) << mode;
  }
  const Result bad = run_cli(dir_, base + "--compile everything -o x.safetensors");
  EXPECT_NE(bad.status, 0);
  // --mode reduce-overhead on the CPU: nothing to capture, the regional result; without --compile an error.
  const Result ro = run_cli(dir_, base + "--compile regional --mode reduce-overhead --json -o ro.safetensors");
  ASSERT_EQ(ro.status, 0) << ro.out;
  EXPECT_TRUE(nlohmann::json::parse(ro.out.substr(ro.out.find("{\n"))).at("compile_stats").at("device_graphs").is_null())
      << ro.out;
  EXPECT_LE(max_rel(diffq::io::SafetensorsFile::open(dir_ / "ro.safetensors").tensor("latents").to_f32_vector(), want),
            1e-5);
  const Result no_compile = run_cli(dir_, base + "--mode reduce-overhead -o x.safetensors");
  EXPECT_EQ(no_compile.status, 1) << no_compile.out;
  EXPECT_NE(no_compile.out.find("--mode reduce-overhead is a compile mode"), std::string::npos) << no_compile.out;
}

// A quantized transformer compiled: its linears run as quantized GEMM nodes (dequantize inside the GEMM,
// none left opaque) and the latents are the eager quantized run's.
TEST_F(CliGenerate, QuantizedCompiledTransformerRunsQuantizedGemmNodes) {
  const std::string base =
      "generate -m " + kTinyFlux + " -p 'a cat' --steps 2 --width 32 --height 32 --seed 3 --output-type latent --quant q8_0 ";
  const Result eager = run_cli(dir_, base + "-o eager.safetensors");
  ASSERT_EQ(eager.status, 0) << eager.out;
  const auto want = diffq::io::SafetensorsFile::open(dir_ / "eager.safetensors").tensor("latents").to_f32_vector();
  for (const char* mode : {"full", "regional"}) {
    const Result r = run_cli(dir_, base + "--compile " + mode + " --json -o q.safetensors");
    ASSERT_EQ(r.status, 0) << r.out;
    const auto j = nlohmann::json::parse(r.out.substr(r.out.find("{\n")));
    const auto& st = j.at("compile_stats");
    EXPECT_GT(st.at("quantized_gemm_nodes").get<int64_t>(), 0) << st.dump();
    EXPECT_EQ(st.at("opaque_nodes").get<int64_t>(), 0) << st.dump();
    const auto got = diffq::io::SafetensorsFile::open(dir_ / "q.safetensors").tensor("latents").to_f32_vector();
    EXPECT_LE(max_rel(got, want), 1e-5) << mode;
  }
  const Result line = run_cli(dir_, base + "--compile regional -o q.safetensors");  // the stderr summary
  ASSERT_EQ(line.status, 0) << line.out;
  EXPECT_NE(line.out.find("quantized GEMM node(s)"), std::string::npos) << line.out;
  EXPECT_EQ(line.out.find("opaque call(s)"), std::string::npos) << line.out;
}

// --compile ... --autotune: the first run times candidates and writes the cache file named by
// DIFFQ_AUTOTUNE_CACHE; a second process finds every node there and times nothing; both give the
// eager latents. --autotune without --compile is an error.
TEST_F(CliGenerate, AutotuneWritesTheCacheAndASecondRunReusesIt) {
  const fs::path cache = dir_ / "tune" / "autotune.json";
  setenv("DIFFQ_AUTOTUNE_CACHE", cache.c_str(), 1);
  const std::string base = "generate -m " + kTinyFlux + " -p 'a cat' --steps 2 --width 32 --height 32 --seed 3 --output-type latent ";
  const Result eager = run_cli(dir_, base + "-o eager.safetensors");
  ASSERT_EQ(eager.status, 0) << eager.out;
  const auto want = diffq::io::SafetensorsFile::open(dir_ / "eager.safetensors").tensor("latents").to_f32_vector();
  nlohmann::json stats[2];
  for (int run = 0; run < 2; ++run) {
    const std::string out = "tuned" + std::to_string(run) + ".safetensors";
    const Result r = run_cli(dir_, base + "--compile regional --autotune --json -o " + out);
    ASSERT_EQ(r.status, 0) << r.out;
    const auto j = nlohmann::json::parse(r.out.substr(r.out.find("{\n")));
    EXPECT_EQ(j.at("autotune"), true);
    stats[run] = j.at("compile_stats").at("autotune");
    EXPECT_EQ(stats[run].at("cache_file"), cache.string());
    const auto got = diffq::io::SafetensorsFile::open(dir_ / out).tensor("latents").to_f32_vector();
    EXPECT_LE(max_rel(got, want), 1e-5) << run;
  }
  unsetenv("DIFFQ_AUTOTUNE_CACHE");
  EXPECT_TRUE(fs::exists(cache));
  EXPECT_GT(stats[0].at("candidates").get<int64_t>(), 0) << stats[0].dump();  // 512 T5 tokens: attention tiles
  EXPECT_EQ(stats[1].at("candidates").get<int64_t>(), 0) << stats[1].dump();
  EXPECT_EQ(stats[1].at("cache_hits"), stats[0].at("nodes")) << stats[1].dump();

  const Result bad = run_cli(dir_, base + "--autotune -o x.safetensors");
  EXPECT_NE(bad.status, 0);
  EXPECT_NE(bad.out.find("--autotune tunes a compiled transformer"), std::string::npos) << bad.out;
  EXPECT_FALSE(fs::exists(dir_ / "x.safetensors"));
}

namespace {

TEST_F(CliGenerate, OpProfileIsPrintedOnlyWhenAskedFor) {
  const std::string args = "generate -m " + kTinyFlux + " -p 'a red fox' -o fox.png --steps 1 --width 32 --height 32";
  const Result plain = run_cli(dir_, args);
  ASSERT_EQ(plain.status, 0) << plain.out;
  EXPECT_EQ(plain.out.find("op profile"), std::string::npos) << plain.out;
  ::setenv("DIFFQ_PROFILE_OPS", "1", 1);
  const Result profiled = run_cli(dir_, args);
  ::unsetenv("DIFFQ_PROFILE_OPS");
  ASSERT_EQ(profiled.status, 0) << profiled.out;
  EXPECT_NE(profiled.out.find("op profile (DIFFQ_PROFILE_OPS)"), std::string::npos) << profiled.out;
  // The tiny pipeline's forward runs linear layers (transformer, encoders) and the VAE's convolutions.
  EXPECT_NE(profiled.out.find("linear float32"), std::string::npos) << profiled.out;
  EXPECT_NE(profiled.out.find("conv2d float32"), std::string::npos) << profiled.out;
  EXPECT_EQ(profiled.out.find("linear float32 ["), std::string::npos) << profiled.out;
  // =shapes: one row per input shapes, with GFLOP/s for linear and sdpa.
  ::setenv("DIFFQ_PROFILE_OPS", "shapes", 1);
  const Result shaped = run_cli(dir_, args);
  ::unsetenv("DIFFQ_PROFILE_OPS");
  ASSERT_EQ(shaped.status, 0) << shaped.out;
  EXPECT_NE(shaped.out.find("GFLOP/s"), std::string::npos) << shaped.out;
  EXPECT_NE(shaped.out.find("linear float32 ["), std::string::npos) << shaped.out;
  EXPECT_NE(shaped.out.find("sdpa float32 ["), std::string::npos) << shaped.out;
}

}  // namespace

// --device cuda where it cannot run: exit 1 with the reason (a CPU-only build has no CUDA backend; a CUDA
// build on a machine without a GPU has no device), nothing written; for generate, bench and serve.
TEST_F(CliGenerate, DeviceCudaWithoutAGpuIsAClearErrorForEveryCommand) {
  const diffq::backend::DeviceInterface* cuda = diffq::backend::device_interface(diffq::DeviceKind::cuda);
  if (cuda && cuda->device_count(nullptr) > 0) GTEST_SKIP() << "a CUDA device is present";
  const std::string why = cuda ? "no CUDA device present" : "has no CUDA backend";
  const Result g = run_cli(dir_, "generate -m " + kTinyFlux + " -p 'a red fox' --steps 1 --width 32 --height 32 "
                                 "--device cuda -o gpu.png");
  EXPECT_EQ(g.status, 1) << g.out;
  EXPECT_NE(g.out.find(why), std::string::npos) << g.out;
  EXPECT_NE(g.out.find("cuda:0"), std::string::npos) << g.out;
  EXPECT_FALSE(fs::exists(dir_ / "gpu.png"));
  const Result b = run_cli(dir_, "bench -m builtin:flux-small --device cuda:1 --combos 'bf16+nf4+model-offload+regional'");
  EXPECT_EQ(b.status, 1) << b.out;
  EXPECT_NE(b.out.find(why), std::string::npos) << b.out;
  EXPECT_NE(b.out.find("cuda:1"), std::string::npos) << b.out;
  // With CUDA graphs (the seeds' compile row with mode="reduce-overhead"), and generate's --mode.
  const Result bg = run_cli(dir_, "bench -m builtin:flux-small --device cuda --combos "
                                  "'bf16+nf4+model-offload+regional+reduce-overhead'");
  EXPECT_EQ(bg.status, 1) << bg.out;
  EXPECT_NE(bg.out.find(why), std::string::npos) << bg.out;
  const Result gg = run_cli(dir_, "generate -m " + kTinyFlux + " -p 'a red fox' --steps 1 --width 32 --height 32 "
                                  "--device cuda --compile regional --mode reduce-overhead -o gpu.png");
  EXPECT_EQ(gg.status, 1) << gg.out;
  EXPECT_NE(gg.out.find(why), std::string::npos) << gg.out;
  EXPECT_FALSE(fs::exists(dir_ / "gpu.png"));
  // The combinations are checked first: one that does not parse says so, not that the GPU is missing.
  const Result bc = run_cli(dir_, "bench -m builtin:flux-small --device cuda --combos 'bf16+regional; bf16+nf5'");
  EXPECT_EQ(bc.status, 1) << bc.out;
  EXPECT_NE(bc.out.find("combination 'bf16+nf5': 'nf5' is not available"), std::string::npos) << bc.out;
  EXPECT_EQ(bc.out.find(why), std::string::npos) << bc.out;
  const Result s = run_cli(dir_, "serve --device cuda --port 0");
  EXPECT_EQ(s.status, 1) << s.out;
  EXPECT_NE(s.out.find(why), std::string::npos) << s.out;
  const Result bad = run_cli(dir_, "generate -p x --device gpu -o bad.png");
  EXPECT_EQ(bad.status, 1) << bad.out;
  EXPECT_NE(bad.out.find("invalid device 'gpu'"), std::string::npos) << bad.out;
}
