// `diffq bench` with step-cache combinations (+fbc, +magcache, ...) and --quality (apps/cli/bench_cache.cpp,
// bench_quality.cpp): the cache's computed/skipped transformer calls in --json, PSNR/SSIM against the
// reference combination (inf / 1 for the reference itself, finite for a cached row), the table's columns, and
// clear errors for a wrong cache spec or a --quality without an uncached, unquantized combination.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_test_util.h"

namespace {

namespace fs = std::filesystem;
using diffq::testing::run_cli;

const std::string kFlux = DIFFQ_SOURCE_DIR "/tests/fixtures/tiny-flux";
const std::string kWan = DIFFQ_SOURCE_DIR "/tests/fixtures/tiny-wan";

nlohmann::json json_of(const std::string& out) {
  const auto at = out.find("[\n");
  if (at == std::string::npos) return nullptr;
  return nlohmann::json::parse(out.substr(at));
}

// The tiny FLUX folder (with its VAE: pixels 32x32, so SSIM's 11x11 window fits). fbc:10: every call after
// the first is within the threshold, so 3 of 4 calls skip; magcache's step rule skips too.
TEST(CliBenchCache, CachedRowsReportSkippedCallsAndQualityAgainstTheReference) {
  const auto r = run_cli(fs::temp_directory_path(),
                         "bench -m '" + kFlux + "' --combos 'fp32; fp32+fbc:10; bf16+magcache:1,max_skip=2; fp32+compile' "
                         "--steps 4 --size 32x32 --repeat 1 --warmup 1 --threads 1 --quality --json");
  ASSERT_EQ(r.status, 0) << r.out;
  const auto j = json_of(r.out);
  ASSERT_TRUE(j.is_array() && j.size() == 4u) << r.out;
  // The reference (fp32): PSNR inf (null in JSON, identical), SSIM 1; no cache object.
  const auto& q0 = j[0].at("quality");
  EXPECT_EQ(q0.at("reference"), "fp32");
  EXPECT_EQ(q0.at("on"), "pixels");
  EXPECT_TRUE(q0.at("identical").get<bool>());
  EXPECT_TRUE(q0.at("psnr_db").is_null());
  EXPECT_DOUBLE_EQ(q0.at("ssim").get<double>(), 1.0);
  EXPECT_FALSE(j[0].contains("cache"));
  // fbc:10: the first call computes, the other three skip transformer_blocks.1..end.
  const auto& c1 = j[1].at("cache");
  EXPECT_EQ(c1.at("method"), "fbc:10");
  EXPECT_EQ(c1.at("computed"), 1) << c1.dump();
  EXPECT_EQ(c1.at("skipped"), 3) << c1.dump();
  EXPECT_EQ(c1.at("always_run"), "transformer_blocks.0");
  EXPECT_EQ(c1.at("calls")[0].at("decisions"), "CSSS") << c1.dump();
  EXPECT_EQ(c1.at("per_range").size(), 2u) << c1.dump();
  const auto& q1 = j[1].at("quality");
  EXPECT_FALSE(q1.at("identical").get<bool>());
  const double p1 = q1.at("psnr_db").get<double>(), s1 = q1.at("ssim").get<double>();
  EXPECT_TRUE(std::isfinite(p1) && p1 > 0) << q1.dump();
  EXPECT_LT(s1, 1.0) << q1.dump();
  EXPECT_GT(s1, -1.0) << q1.dump();
  // magcache in bf16: some calls skipped; quality finite.
  const auto& c2 = j[2].at("cache");
  EXPECT_EQ(c2.at("computed").get<int64_t>() + c2.at("skipped").get<int64_t>(), 4) << c2.dump();
  EXPECT_TRUE(std::isfinite(j[2].at("quality").at("psnr_db").get<double>())) << j[2].dump();
  EXPECT_FALSE(j[3].contains("cache"));
  for (const auto& row : j) EXPECT_FALSE(row.contains("quality_output")) << row.dump();
}

TEST(CliBenchCache, TableShowsCacheAndQualityColumnsAndSaysWhatWasCompared) {
  const auto r = run_cli(fs::temp_directory_path(),
                         "bench -m '" + kFlux + "' --combos 'bf16; bf16+fbc:10' --steps 3 --size 32x32 --repeat 1 "
                         "--warmup 0 --threads 1 --quality");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("transformer calls computed / skipped | PSNR dB | SSIM |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| 1 / 2 |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| - | inf | 1.0000 |"), std::string::npos) << r.out;  // the reference row
  EXPECT_NE(r.out.find("vs 'bf16'"), std::string::npos) << r.out;              // no fp32: the first uncached
  EXPECT_NE(r.out.find("LPIPS is not computed"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("fbc:10: a skipped call skips transformer_blocks.1.."), std::string::npos) << r.out;
}

// A builtin has no VAE: the latents are compared (FLUX's unpacked to [B, C, H/8, W/8]).
TEST(CliBenchCache, BuiltinComparesLatentsAndWanFolderCaches) {
  auto r = run_cli(fs::temp_directory_path(),
                   "bench -m builtin:flux-small --combos 'bf16+teacache:5; fp32' --steps 3 --size 128x128 --repeat 1 "
                   "--warmup 0 --threads 1 --quality --json");
  ASSERT_EQ(r.status, 0) << r.out;
  auto j = json_of(r.out);
  ASSERT_TRUE(j.is_array() && j.size() == 2u) << r.out;
  EXPECT_EQ(j[0].at("quality").at("reference"), "fp32");  // fp32 preferred although listed second
  EXPECT_EQ(j[0].at("quality").at("on"), "latents");
  EXPECT_GT(j[0].at("cache").at("skipped").get<int64_t>(), 0) << j[0].dump();
  EXPECT_TRUE(j[1].at("quality").at("identical").get<bool>());
  EXPECT_DOUBLE_EQ(j[1].at("quality").at("ssim").get<double>(), 1.0);  // 16x16 latent planes: the window fits
  EXPECT_GT(j[0].at("quality").at("data_range").get<double>(), 0.0);

  r = run_cli(fs::temp_directory_path(),
              "bench -m '" + kWan + "' --combos 'fp32; fp32+fbc:10' --steps 3 --size 32x32 --frames 5 --repeat 1 "
              "--warmup 0 --threads 1 --quality --json");
  ASSERT_EQ(r.status, 0) << r.out;
  j = json_of(r.out);
  ASSERT_TRUE(j.is_array() && j.size() == 2u) << r.out;
  const auto& c = j[1].at("cache");
  EXPECT_EQ(c.at("calls").size(), 2u) << c.dump();  // CFG: the cond and uncond contexts
  EXPECT_EQ(c.at("skipped"), 4) << c.dump();
  EXPECT_TRUE(std::isfinite(j[1].at("quality").at("psnr_db").get<double>())) << j[1].dump();
}

TEST(CliBenchCache, BadCacheSpecsAndQualityWithoutAReferenceAreClearErrors) {
  const auto dir = fs::temp_directory_path();
  auto r = run_cli(dir, "bench -m '" + kFlux + "' --combos 'fp32; bf16+fbc:abc' --steps 1 --size 32x32");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("combination 'bf16+fbc:abc': cache 'fbc:abc'"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("bench: fp32"), std::string::npos) << r.out;  // nothing ran
  r = run_cli(dir, "bench -m '" + kFlux + "' --combos 'bf16+fbc+magcache' --steps 1 --size 32x32");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("two step caches"), std::string::npos) << r.out;
  r = run_cli(dir, "bench -m '" + kFlux + "' --combos 'bf16+taylorseer:order=x' --steps 1 --size 32x32");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("taylorseer:order=x"), std::string::npos) << r.out;
  r = run_cli(dir, "bench -m '" + kFlux + "' --combos 'bf16+nf4; bf16+fbc' --steps 1 --size 32x32 --quality");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("--quality compares every combination with one that neither quantizes nor caches"),
            std::string::npos) << r.out;
}

}  // namespace
