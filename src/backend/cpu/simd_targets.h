// The Highway SIMD targets of the CPU kernels: compiled into this binary, supported by this CPU, and the
// one runtime dispatch picks (the best of both). DIFFQ_SIMD_TARGET=<name> (AVX3, AVX2, EMU128, as
// hwy::TargetName spells them) makes every dispatched kernel run that lower target instead: the test
// suite runs the kernel tests once per target this way (tests/CMakeLists.txt), and A/B runs use it.
#pragma once

#include <string>
#include <vector>

namespace diffq::backend::cpu {

std::vector<std::string> simd_targets_compiled();   // best first
std::vector<std::string> simd_targets_supported();  // compiled and runnable here (ignores the override)
std::string simd_target_chosen();                   // what dispatch runs now
// Whether dispatch runs an AVX-512 target now (not under a forced lower one): cheap, for per-call kernel
// choices (simd_level.cpp).
bool simd_dispatch_is_avx512();

// Restricts dispatch to `name` (must be compiled and supported: a clear Error otherwise). An empty name
// restores the default. Applied from DIFFQ_SIMD_TARGET by apply_simd_target_env().
void force_simd_target(const std::string& name);

// Reads DIFFQ_SIMD_TARGET once (the op dispatcher calls this before the first kernel runs).
void apply_simd_target_env();

}  // namespace diffq::backend::cpu
