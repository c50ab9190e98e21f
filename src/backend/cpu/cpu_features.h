// The x86 CPU features that decide which kernels can run, read from CPUID (and XGETBV: a feature is
// usable only when the OS saves its register state). One reading per process; every kernel choice and
// `diffq info` ask here, never /proc/cpuinfo.
#pragma once

#include <string>

namespace diffq::backend::cpu {

struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false;
  bool avx512_bf16 = false, avx512_fp16 = false;
  bool avx_vnni = false, avx512_vnni = false;
  bool amx_tile = false, amx_bf16 = false, amx_int8 = false;
  bool amd = false;  // CPUID's vendor is "AuthenticAMD" (kernel choices measured per vendor: gemm.cpp)
};

// What CPUID reports and the OS enables (XCR0: AVX state for AVX/AVX2, opmask + ZMM state for AVX-512,
// tile config + data for AMX). AMX also needs a per-process permission (arch_prctl
// ARCH_REQ_XCOMP_PERM) before its first use: amx_tiles_permitted() asks for it.
const CpuFeatures& cpu_features();

// Asks the Linux kernel for the AMX tile data state for this process (once; later calls return the
// first answer). False where the CPU has no AMX or the kernel refuses.
bool amx_tiles_permitted();

// /proc/cpuinfo's "model name" (the CPUID brand string), or "unknown CPU".
std::string cpu_model_name();

}  // namespace diffq::backend::cpu
