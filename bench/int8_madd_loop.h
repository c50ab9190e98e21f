// The int8 GEMM's inner-loop pair without AVX-512 VNNI (src/backend/cpu/int8_gemm.h): vpmaddwd (16
// int16 products summed pairwise into 8 int32 lanes = 16 multiply-adds) + vpaddd into an accumulator,
// in 12 independent chains, so the loop runs at whatever rate the core issues the pair — the ceiling of
// any exact int8 x int8 -> int32 GEMM on an AVX2-only x86 core. x86-64 only.
#pragma once

#include <cstdint>

namespace int8_bench {

constexpr double kMacsPerLoop = 12 * 16;  // multiply-adds of one iteration of madd_add_loop

inline void madd_add_loop(int64_t n) {
  asm volatile(
      "vpxor %%ymm0, %%ymm0, %%ymm0\n\t"
      "vpxor %%ymm1, %%ymm1, %%ymm1\n\t"
      "vpxor %%ymm2, %%ymm2, %%ymm2\n\t"
      "vpxor %%ymm3, %%ymm3, %%ymm3\n\t"
      "vpxor %%ymm4, %%ymm4, %%ymm4\n\t"
      "vpxor %%ymm5, %%ymm5, %%ymm5\n\t"
      "vpxor %%ymm6, %%ymm6, %%ymm6\n\t"
      "vpxor %%ymm7, %%ymm7, %%ymm7\n\t"
      "vpxor %%ymm8, %%ymm8, %%ymm8\n\t"
      "vpxor %%ymm9, %%ymm9, %%ymm9\n\t"
      "vpxor %%ymm10, %%ymm10, %%ymm10\n\t"
      "vpxor %%ymm11, %%ymm11, %%ymm11\n\t"
      "vpxor %%ymm12, %%ymm12, %%ymm12\n\t"
      "vpxor %%ymm13, %%ymm13, %%ymm13\n\t"
      "1:\n\t"
      "vpmaddwd %%ymm12, %%ymm13, %%ymm14\n\t"
      "vpaddd %%ymm14, %%ymm0, %%ymm0\n\t"
      "vpmaddwd %%ymm12, %%ymm13, %%ymm15\n\t"
      "vpaddd %%ymm15, %%ymm1, %%ymm1\n\t"
      "vpmaddwd %%ymm12, %%ymm13, %%ymm14\n\t"
      "vpaddd %%ymm14, %%ymm2, %%ymm2\n\t"
      "vpmaddwd %%ymm12, %%ymm13, %%ymm15\n\t"
      "vpaddd %%ymm15, %%ymm3, %%ymm3\n\t"
      "vpmaddwd %%ymm12, %%ymm13, %%ymm14\n\t"
      "vpaddd %%ymm14, %%ymm4, %%ymm4\n\t"
      "vpmaddwd %%ymm12, %%ymm13, %%ymm15\n\t"
      "vpaddd %%ymm15, %%ymm5, %%ymm5\n\t"
      "vpmaddwd %%ymm12, %%ymm13, %%ymm14\n\t"
      "vpaddd %%ymm14, %%ymm6, %%ymm6\n\t"
      "vpmaddwd %%ymm12, %%ymm13, %%ymm15\n\t"
      "vpaddd %%ymm15, %%ymm7, %%ymm7\n\t"
      "vpmaddwd %%ymm12, %%ymm13, %%ymm14\n\t"
      "vpaddd %%ymm14, %%ymm8, %%ymm8\n\t"
      "vpmaddwd %%ymm12, %%ymm13, %%ymm15\n\t"
      "vpaddd %%ymm15, %%ymm9, %%ymm9\n\t"
      "vpmaddwd %%ymm12, %%ymm13, %%ymm14\n\t"
      "vpaddd %%ymm14, %%ymm10, %%ymm10\n\t"
      "vpmaddwd %%ymm12, %%ymm13, %%ymm15\n\t"
      "vpaddd %%ymm15, %%ymm11, %%ymm11\n\t"
      "dec %0\n\t"
      "jnz 1b\n\t"
      "vzeroupper\n\t"
      : "+r"(n)
      :
      : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10",
        "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "cc");
}

}  // namespace int8_bench
