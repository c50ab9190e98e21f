// The FP32 FMA loop of bench_fma_peak, shared with the benchmarks that report "% of peak": 12
// independent 256-bit FMA chains (vfmadd231ps ymm: 16 FLOP each), enough to cover FMA latency x 2 FMA
// pipes (Zen 3: 4 cycles x 2), so the loop runs at the core's FMA throughput. x86-64 only.
#pragma once

#include <cstdint>

namespace fma_bench {

constexpr double kFlopPerLoop = 12 * 16;  // FLOP of one iteration of fma_loop

inline void fma_loop(int64_t n) {
  asm volatile(
      "vxorps %%ymm0, %%ymm0, %%ymm0\n\t"
      "vxorps %%ymm1, %%ymm1, %%ymm1\n\t"
      "vxorps %%ymm2, %%ymm2, %%ymm2\n\t"
      "vxorps %%ymm3, %%ymm3, %%ymm3\n\t"
      "vxorps %%ymm4, %%ymm4, %%ymm4\n\t"
      "vxorps %%ymm5, %%ymm5, %%ymm5\n\t"
      "vxorps %%ymm6, %%ymm6, %%ymm6\n\t"
      "vxorps %%ymm7, %%ymm7, %%ymm7\n\t"
      "vxorps %%ymm8, %%ymm8, %%ymm8\n\t"
      "vxorps %%ymm9, %%ymm9, %%ymm9\n\t"
      "vxorps %%ymm10, %%ymm10, %%ymm10\n\t"
      "vxorps %%ymm11, %%ymm11, %%ymm11\n\t"
      "vxorps %%ymm12, %%ymm12, %%ymm12\n\t"
      "vxorps %%ymm13, %%ymm13, %%ymm13\n\t"
      "1:\n\t"
      "vfmadd231ps %%ymm12, %%ymm13, %%ymm0\n\t"
      "vfmadd231ps %%ymm12, %%ymm13, %%ymm1\n\t"
      "vfmadd231ps %%ymm12, %%ymm13, %%ymm2\n\t"
      "vfmadd231ps %%ymm12, %%ymm13, %%ymm3\n\t"
      "vfmadd231ps %%ymm12, %%ymm13, %%ymm4\n\t"
      "vfmadd231ps %%ymm12, %%ymm13, %%ymm5\n\t"
      "vfmadd231ps %%ymm12, %%ymm13, %%ymm6\n\t"
      "vfmadd231ps %%ymm12, %%ymm13, %%ymm7\n\t"
      "vfmadd231ps %%ymm12, %%ymm13, %%ymm8\n\t"
      "vfmadd231ps %%ymm12, %%ymm13, %%ymm9\n\t"
      "vfmadd231ps %%ymm12, %%ymm13, %%ymm10\n\t"
      "vfmadd231ps %%ymm12, %%ymm13, %%ymm11\n\t"
      "dec %0\n\t"
      "jnz 1b\n\t"
      "vzeroupper\n\t"
      : "+r"(n)
      :
      : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10",
        "xmm11", "xmm12", "xmm13", "cc");
}

}  // namespace fma_bench
