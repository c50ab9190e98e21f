// Whether dispatch runs an AVX-512 target now (simd_targets.h: simd_dispatch_is_avx512): a dispatched
// function per target, so the answer comes from Highway's cached choice (reset by every forced target),
// never from a fresh CPU detection (hwy::SupportedTargets runs CPUID on each call: a VM exit under
// virtualisation, and the kernels that ask do so per call).
#include "backend/cpu/hwy_config.h"
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backend/cpu/simd_level.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "backend/cpu/simd_targets.h"

HWY_BEFORE_NAMESPACE();
namespace diffq::backend::cpu {
namespace HWY_NAMESPACE {

// x86 target bits: a lower bit is a better target, and every AVX-512 one lies at or below AVX3's.
bool DispatchIsAvx512() {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  return true;
#else
  return false;
#endif
}

}  // namespace HWY_NAMESPACE
}  // namespace diffq::backend::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace diffq::backend::cpu {

HWY_EXPORT(DispatchIsAvx512);

bool simd_dispatch_is_avx512() { return HWY_DYNAMIC_DISPATCH(DispatchIsAvx512)(); }

}  // namespace diffq::backend::cpu
#endif
