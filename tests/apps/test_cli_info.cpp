// `diffq info --json` against the machine: the CPU features it reports equal /proc/cpuinfo's flags (the
// kernel's view of CPUID and of what the OS enables), the SIMD target and kernels follow
// DIFFQ_SIMD_TARGET / DIFFQ_GEMM_KERNEL / DIFFQ_NUM_THREADS, and bad overrides are clear errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>

#include "cli_test_util.h"

namespace {

using diffq::testing::CliResult;

CliResult run_info_cli(const std::string& env, const std::string& args, bool merge = false) {
  return diffq::testing::run_cli_env(std::filesystem::current_path(), env, args, !merge);
}

std::set<std::string> cpuinfo_flags() {
  std::ifstream f("/proc/cpuinfo");
  std::set<std::string> flags;
  for (std::string line; std::getline(f, line);) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream s(line.substr(line.find(':') + 1));
    for (std::string w; s >> w;) flags.insert(w);
    break;  // every core reports the same
  }
  return flags;
}

nlohmann::json info(const std::string& env = "DIFFQ_NUM_THREADS=2") {
  const CliResult r = run_info_cli(env, "info --json");
  EXPECT_EQ(r.status, 0) << r.out;
  return nlohmann::json::parse(r.out);
}

}  // namespace

TEST(CliInfo, CpuFeaturesEqualProcCpuinfoFlags) {
  const std::set<std::string> flags = cpuinfo_flags();
  if (flags.empty()) GTEST_SKIP() << "no /proc/cpuinfo flags line on this machine";
  const nlohmann::json j = info();
  const auto& feats = j.at("cpu").at("features");
  const std::set<std::string> want_keys = {"avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_bf16",
                                           "avx512_fp16", "avx_vnni", "avx512_vnni", "amx_tile", "amx_bf16", "amx_int8"};
  std::set<std::string> keys;
  for (const auto& [k, v] : feats.items()) {
    keys.insert(k);
    EXPECT_EQ(v.get<bool>(), flags.count(k) == 1) << k << ": diffq says " << v << ", /proc/cpuinfo "
                                                 << (flags.count(k) ? "has" : "lacks") << " it";
  }
  EXPECT_EQ(keys, want_keys);
  EXPECT_FALSE(j.at("cpu").at("model").get<std::string>().empty());
}

TEST(CliInfo, ReportsBuildKernelsThreadsAndGpus) {
  const nlohmann::json j = info();
  EXPECT_EQ(j.at("version").get<std::string>(), DIFFQ_VERSION);
  EXPECT_FALSE(j.at("commit").get<std::string>().empty());
  EXPECT_EQ(j.at("threads").get<int>(), 2);
  const auto& b = j.at("build");
  EXPECT_NE(b.at("onednn").get<std::string>().find('.'), std::string::npos);
  EXPECT_NE(b.at("blas").get<std::string>().find("OpenBLAS"), std::string::npos);
  const auto compiled = b.at("simd_targets").get<std::vector<std::string>>();
  const auto runnable = j.at("cpu").at("simd_targets_supported").get<std::vector<std::string>>();
  ASSERT_FALSE(runnable.empty());
  EXPECT_EQ(j.at("cpu").at("simd_target").get<std::string>(), runnable.front());  // the best runnable one
  for (const auto& t : runnable) EXPECT_NE(std::find(compiled.begin(), compiled.end(), t), compiled.end()) << t;
  for (const char* k : {"gemm_f32", "gemm_bf16", "gemm_int8 (torchao int8dq)", "attention", "conv2d_f32", "conv2d_bf16"})
    EXPECT_FALSE(j.at("kernels").at(k).get<std::string>().empty()) << k;
  if (j.at("gpus").empty()) EXPECT_FALSE(j.at("gpus_none_reason").get<std::string>().empty());
  EXPECT_NE(j.at("summary").get<std::string>().find(j.at("cpu").at("model").get<std::string>()), std::string::npos);
  const CliResult text = run_info_cli("DIFFQ_NUM_THREADS=2", "info");
  EXPECT_EQ(text.status, 0);
  EXPECT_NE(text.out.find("kernels:"), std::string::npos) << text.out;
}

TEST(CliInfo, OverridesChangeWhatItReports) {
  const nlohmann::json base = info();
  const auto runnable = base.at("cpu").at("simd_targets_supported").get<std::vector<std::string>>();
  for (const auto& t : runnable) {
    const nlohmann::json j = info("DIFFQ_NUM_THREADS=1 DIFFQ_SIMD_TARGET=" + t);
    EXPECT_EQ(j.at("cpu").at("simd_target").get<std::string>(), t);
    EXPECT_EQ(j.at("threads").get<int>(), 1);
    EXPECT_NE(j.at("kernels").at("attention").get<std::string>().find(t), std::string::npos);
  }
  const nlohmann::json ob = info("DIFFQ_GEMM_KERNEL=openblas");
  EXPECT_NE(ob.at("kernels").at("gemm_bf16").get<std::string>().find("OpenBLAS"), std::string::npos);
  const nlohmann::json dq = info("DIFFQ_GEMM_KERNEL=diffq");
  EXPECT_NE(dq.at("kernels").at("gemm_f32").get<std::string>().find("diffq"), std::string::npos);
  const CliResult bad = run_info_cli("DIFFQ_SIMD_TARGET=NEON", "info --json", true);
  EXPECT_EQ(bad.status, 1);
  EXPECT_NE(bad.out.find("DIFFQ_SIMD_TARGET='NEON'"), std::string::npos) << bad.out;
}
