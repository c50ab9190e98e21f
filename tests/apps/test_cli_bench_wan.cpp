// `diffq bench` on Wan (apps/cli/bench_wan.cpp): a WanPipeline folder (the bundled tiny one, run whole) and a
// builtin (builtin:wan-small on a tiny grid), each combination in its own worker, the Wan fields of the JSON
// rows (frames after the 4k + 1 rounding, CFG's two passes per step), and --frames refused for FLUX.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_test_util.h"

namespace {

namespace fs = std::filesystem;
using diffq::testing::run_cli;

const std::string kWan = DIFFQ_SOURCE_DIR "/tests/fixtures/tiny-wan";
const std::string kFlux = DIFFQ_SOURCE_DIR "/tests/fixtures/tiny-flux";

nlohmann::json json_of(const std::string& out) {
  const auto at = out.find("[\n");
  if (at == std::string::npos) return nullptr;
  return nlohmann::json::parse(out.substr(at));
}

TEST(CliBenchWan, FolderCombinationsReportFramesAndTwoPassesPerStep) {
  const auto r = run_cli(fs::temp_directory_path(),
                         "bench -m '" + kWan + "' --combos 'fp32; bf16+q8_0; fp32+compile' --steps 2 --size 32x32 "
                         "--frames 6 --repeat 1 --warmup 0 --threads 1 --json");
  ASSERT_EQ(r.status, 0) << r.out;
  const auto j = json_of(r.out);
  ASSERT_TRUE(j.is_array()) << r.out;
  ASSERT_EQ(j.size(), 3u) << r.out;
  EXPECT_EQ(j[1].at("dtype"), "bfloat16");
  EXPECT_GT(j[1].at("transformer_quantized_bytes").get<int64_t>(), 0);
  EXPECT_EQ(j[2].at("compile"), "regional");
  for (const auto& row : j) {
    EXPECT_EQ(row.at("frames"), 5) << row.dump();  // 6 -> 5, as WanPipeline rounds
    EXPECT_EQ(row.at("size"), "32x32") << row.dump();
    EXPECT_EQ(row.at("transformer_passes_per_step"), 2) << row.dump();
    EXPECT_EQ(row.at("guidance_scale"), 5.0) << row.dump();
    EXPECT_EQ(row.at("step_s").at("n"), 2) << row.dump();
    EXPECT_NE(row.at("note").get<std::string>().find("CFG on"), std::string::npos) << row.dump();
  }
}

TEST(CliBenchWan, BuiltinRunsInMemoryWithItsDefaultsOrTheGivenGrid) {
  const auto r = run_cli(fs::temp_directory_path(),
                         "bench -m builtin:wan-small --combos 'bf16' --steps 1 --size 32x32 --frames 1 --repeat 1 "
                         "--warmup 0 --threads 1 --json");
  ASSERT_EQ(r.status, 0) << r.out;
  const auto j = json_of(r.out);
  ASSERT_TRUE(j.is_array() && j.size() == 1u) << r.out;
  EXPECT_EQ(j[0].at("model"), "builtin:wan-small");
  EXPECT_EQ(j[0].at("frames"), 1);
  EXPECT_EQ(j[0].at("transformer_dense_bytes").get<int64_t>() > 0, true);
  EXPECT_NE(j[0].at("note").get<std::string>().find("latent output"), std::string::npos);
}

TEST(CliBenchWan, FramesAreRefusedForFlux) {
  const auto r = run_cli(fs::temp_directory_path(),
                         "bench -m '" + kFlux + "' --combos fp32 --steps 1 --size 32x32 --frames 5 --repeat 1 --warmup 0");
  EXPECT_NE(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("--frames is for Wan models"), std::string::npos) << r.out;
}

}  // namespace
