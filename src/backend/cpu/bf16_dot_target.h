// The function attribute of diffq's AVX512-BF16 kernels (bf16_dot_gemm.cpp, attention_bf16_dot.cpp):
// compiled for vdpbf16ps whatever the build's baseline, called only where bf16_dot_gemm_usable().
// Include in .cpp files only (it switches off one warning for the file).
#pragma once

#include <immintrin.h>

// GCC 12's AVX-512 intrinsic headers trip -Wmaybe-uninitialized on their own _mm512_undefined
// placeholders when inlined into target-attribute functions (a known false positive).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#define DIFFQ_BF16_DOT_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
