// `diffq bench` as a user runs it, on the bundled tiny pipeline (fast): one worker per combination,
// dtype + quantization + offload combinations, the JSON fields the table is built from, and a clear
// error for a combination it does not know.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_test_util.h"

namespace {

namespace fs = std::filesystem;
using diffq::testing::run_cli;

const std::string kModel = DIFFQ_SOURCE_DIR "/tests/fixtures/tiny-flux";

// The JSON array printed after any progress lines.
nlohmann::json json_of(const std::string& out) {
  const auto at = out.find("[\n");
  if (at == std::string::npos) return nullptr;
  return nlohmann::json::parse(out.substr(at));
}

TEST(CliBench, DtypeQuantAndOffloadCombinationsEachReportTheirRun) {
  const auto dir = fs::temp_directory_path();
  const auto r = run_cli(dir, "bench -m '" + kModel +
                                  "' --combos 'fp32; fp32+group-offload:2; bf16+q8_0+disk-offload; fp32+compile; bf16+nf4+compile-full' "
                                  "--steps 2 --size 32x32 --repeat 1 --warmup 0 --threads 1 --json");
  ASSERT_EQ(r.status, 0) << r.out;
  const auto j = json_of(r.out);
  ASSERT_TRUE(j.is_array()) << r.out;
  ASSERT_EQ(j.size(), 5u) << r.out;
  EXPECT_EQ(j[3].at("compile"), "regional");
  EXPECT_EQ(j[4].at("compile"), "full");
  EXPECT_TRUE(j[0].at("compile").is_null());
  EXPECT_EQ(j[0].at("combo"), "fp32");
  EXPECT_TRUE(j[0].at("offload").is_null());
  EXPECT_EQ(j[1].at("offload"), "group:2");
  EXPECT_EQ(j[2].at("offload"), "disk");
  EXPECT_EQ(j[2].at("dtype"), "bfloat16");
  EXPECT_GT(j[2].at("transformer_quantized_bytes").get<int64_t>(), 0);
  EXPECT_EQ(j[0].at("transformer_quantized_bytes").get<int64_t>(), 0);
  for (const auto& row : j) {
    EXPECT_EQ(row.at("step_s").at("n"), 2) << row.dump();  // one time per denoising step
    EXPECT_EQ(row.at("latency_s").at("n"), 1) << row.dump();
    EXPECT_GT(row.at("peak_rss_bytes").get<int64_t>(), 0) << row.dump();
    // Where the OS lets the peak be reset, the generation's peak is reported on its own.
    if (!row.at("generate_peak_rss_bytes").is_null())
      EXPECT_LE(row.at("generate_peak_rss_bytes").get<int64_t>(), row.at("peak_rss_bytes").get<int64_t>());
  }
}

// "compile+autotune": each worker reports its tuning; the second worker finds every choice in the
// cache file the first wrote (DIFFQ_AUTOTUNE_CACHE) and times nothing.
TEST(CliBench, AutotuneCombinationReusesTheCacheInTheNextWorker) {
  const auto dir = fs::temp_directory_path() / ("diffq-bench-autotune-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  setenv("DIFFQ_AUTOTUNE_CACHE", (dir / "autotune.json").c_str(), 1);
  const auto r = run_cli(dir, "bench -m '" + kModel +
                                  "' --combos 'fp32+compile+autotune; fp32+compile+autotune; fp32+compile' "
                                  "--steps 1 --size 32x32 --repeat 1 --warmup 1 --json");
  unsetenv("DIFFQ_AUTOTUNE_CACHE");
  ASSERT_EQ(r.status, 0) << r.out;
  const auto j = json_of(r.out);
  ASSERT_TRUE(j.is_array() && j.size() == 3u) << r.out;
  EXPECT_EQ(j[0].at("autotune"), true);
  EXPECT_EQ(j[2].at("autotune"), false);
  EXPECT_TRUE(j[2].at("compile_stats").at("autotune").is_null());
  const auto& first = j[0].at("compile_stats").at("autotune");
  const auto& second = j[1].at("compile_stats").at("autotune");
  EXPECT_GT(first.at("candidates").get<int64_t>(), 0) << first.dump();
  EXPECT_EQ(second.at("candidates").get<int64_t>(), 0) << second.dump();
  EXPECT_EQ(second.at("cache_hits"), first.at("nodes")) << second.dump();
  EXPECT_TRUE(fs::exists(dir / "autotune.json"));
  fs::remove_all(dir);

  const auto bad = run_cli(fs::temp_directory_path(), "bench -m '" + kModel + "' --combos 'fp32+autotune' --steps 1");
  EXPECT_NE(bad.status, 0);
  EXPECT_NE(bad.out.find("autotune tunes a compiled transformer"), std::string::npos) << bad.out;
}

TEST(CliBench, UnknownCombinationIsAClearErrorBeforeAnythingRuns) {
  const auto dir = fs::temp_directory_path();
  auto r = run_cli(dir, "bench -m '" + kModel + "' --combos 'fp32; bf16+turbo' --steps 1 --size 32x32");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("'turbo' is not available"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("bench: fp32"), std::string::npos) << r.out;  // nothing ran
  r = run_cli(dir, "bench -m '" + kModel + "' --combos 'fp32+group-offload+leaf-offload' --steps 1");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("two offload modes"), std::string::npos) << r.out;
  r = run_cli(dir, "bench -m '" + kModel + "' --combos 'fp32+compile+compile-full' --steps 1");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("compiles twice"), std::string::npos) << r.out;
  r = run_cli(dir, "bench -m '" + kModel + "' --combos 'fp32+reduce-overhead' --steps 1");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("reduce-overhead replays a compiled transformer"), std::string::npos) << r.out;
  r = run_cli(dir, "bench -m '" + kModel + "' --combos 'fp32+compile+autotune+reduce-overhead' --steps 1");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("two compile modes"), std::string::npos) << r.out;
  r = run_cli(dir, "bench -m '" + kModel + "' --combos 'fp32+group-offload:x' --steps 1");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("group:x"), std::string::npos) << r.out;
}

}  // namespace
