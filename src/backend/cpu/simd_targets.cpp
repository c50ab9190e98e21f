#include "backend/cpu/simd_targets.h"

#include "backend/cpu/hwy_config.h"
#include <hwy/highway.h>
#include <hwy/targets.h>

#include <cstdlib>
#include <mutex>

#include "diffq/error.h"

namespace diffq::backend::cpu {

namespace {

std::vector<std::string> names_of(int64_t mask) {
  std::vector<std::string> out;
  // Highway's target bits: a lower bit is a better target.
  for (int64_t b = 1; b != 0 && b <= (int64_t(1) << 62); b <<= 1)
    if (mask & b) out.emplace_back(hwy::TargetName(b));
  return out;
}

int64_t bit_of(const std::string& name) {
  for (int64_t b = 1; b != 0 && b <= (int64_t(1) << 62); b <<= 1)
    if ((HWY_TARGETS & b) && name == hwy::TargetName(b)) return b;
  return 0;
}

// SupportedTargets() honours a forced target; this is the CPU's own answer.
int64_t cpu_supported_mask() {
  static const int64_t m = [] {
    hwy::SetSupportedTargetsForTest(0);
    return int64_t(hwy::SupportedTargets());
  }();
  return m;
}

}  // namespace

std::vector<std::string> simd_targets_compiled() { return names_of(HWY_TARGETS); }

std::vector<std::string> simd_targets_supported() { return names_of(HWY_TARGETS & cpu_supported_mask()); }

std::string simd_target_chosen() {
  const auto targets = hwy::SupportedAndGeneratedTargets();  // best first, honours the override
  return targets.empty() ? "none" : hwy::TargetName(targets.front());
}

void force_simd_target(const std::string& name) {
  const int64_t supported = cpu_supported_mask();
  if (name.empty()) {
    hwy::SetSupportedTargetsForTest(0);
    return;
  }
  const int64_t b = bit_of(name);
  std::string known;
  for (const auto& n : simd_targets_supported()) known += (known.empty() ? "" : ", ") + n;
  check(b != 0, "simd", "DIFFQ_SIMD_TARGET='", name, "' is not a target compiled into diffq (this CPU runs: ", known, ")");
  check((supported & b) != 0, "simd", "DIFFQ_SIMD_TARGET='", name, "': this CPU cannot run it (it runs: ", known, ")");
  // Also resets every dispatch table, so kernels pick the new target at their next call.
  hwy::SetSupportedTargetsForTest(b);
}

void apply_simd_target_env() {
  static std::once_flag once;
  std::call_once(once, [] {
    (void)cpu_supported_mask();
    if (const char* env = std::getenv("DIFFQ_SIMD_TARGET"); env && *env) force_simd_target(env);
  });
}

}  // namespace diffq::backend::cpu
