// Linked into every test binary: DIFFQ_SIMD_TARGET=<Highway target> runs the whole binary with every
// dispatched kernel on that target (tests/CMakeLists.txt registers the kernel suites once per compiled
// target), so an AVX2 or EMU128 path is also checked on an AVX-512 machine. A target this CPU cannot
// run, or the one the default run already uses, skips every test and says why.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "backend/cpu/simd_targets.h"

namespace {

class SimdTargetEnv : public ::testing::Environment {
 public:
  void SetUp() override {
    const char* env = std::getenv("DIFFQ_SIMD_TARGET");
    if (!env || !*env) return;
    const std::string want = env;
    const auto supported = diffq::backend::cpu::simd_targets_supported();
    const auto compiled = diffq::backend::cpu::simd_targets_compiled();
    bool ok = false, built = false;
    for (const auto& s : supported) ok |= s == want;
    for (const auto& s : compiled) built |= s == want;
    if (!built) GTEST_SKIP() << "SIMD target " << want << " is not compiled into this build";
    if (!ok) GTEST_SKIP() << "this CPU lacks SIMD target " << want << " (its best is " << supported.front() << ")";
    if (want == supported.front() && std::getenv("DIFFQ_SIMD_TARGET_RUN_BEST") == nullptr)
      GTEST_SKIP() << want << " is this CPU's best target: the default run already covers it";
    diffq::backend::cpu::force_simd_target(want);
    if (diffq::backend::cpu::simd_target_chosen() != want) FAIL() << "dispatch did not switch to " << want;
  }
};

[[maybe_unused]] ::testing::Environment* const kEnv = ::testing::AddGlobalTestEnvironment(new SimdTargetEnv);

}  // namespace
