// Highway target selection for the CPU kernels; include before any Highway header. Runtime dispatch
// picks AVX-512 (AVX3) or AVX2 where present and falls back to portable EMU128 code elsewhere; the
// SSSE3/SSE4 variants are skipped to halve compile time (x86 CPUs without AVX2 are not a target).
#pragma once

#ifndef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS (HWY_SSSE3 | HWY_SSE4)
#endif
