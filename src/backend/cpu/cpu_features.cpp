#include "backend/cpu/cpu_features.h"

#include <cstdint>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace diffq::backend::cpu {

namespace {

#if defined(__x86_64__) || defined(__i386__)
struct Regs {
  uint32_t a = 0, b = 0, c = 0, d = 0;
};

Regs cpuid(uint32_t leaf, uint32_t sub) {
  Regs r;
  if (!__get_cpuid_count(leaf, sub, &r.a, &r.b, &r.c, &r.d)) r = {};
  return r;
}

uint64_t xgetbv0() {
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (uint64_t(hi) << 32) | lo;
}

bool bit(uint32_t r, int i) { return (r >> i) & 1u; }

CpuFeatures detect() {
  CpuFeatures f;
  const Regs l1 = cpuid(1, 0);
  const bool osxsave = bit(l1.c, 27);
  const uint64_t xcr0 = osxsave ? xgetbv0() : 0;
  const bool os_avx = (xcr0 & 0x6) == 0x6;             // SSE + AVX (YMM) state
  const bool os_avx512 = os_avx && (xcr0 & 0xe0) == 0xe0;  // opmask, ZMM_Hi256, Hi16_ZMM
  const bool os_amx = (xcr0 & 0x60000) == 0x60000;       // XTILECFG + XTILEDATA
  const Regs l0 = cpuid(0, 0);
  const uint32_t max_leaf = l0.a;
  f.amd = l0.b == 0x68747541u && l0.d == 0x69746e65u && l0.c == 0x444d4163u;  // "Auth" "enti" "cAMD"
  const Regs l7 = max_leaf >= 7 ? cpuid(7, 0) : Regs{};
  const Regs l7s1 = max_leaf >= 7 && l7.a >= 1 ? cpuid(7, 1) : Regs{};
  f.fma = os_avx && bit(l1.c, 12);
  f.f16c = os_avx && bit(l1.c, 29);
  f.avx2 = os_avx && bit(l7.b, 5);
  f.avx512f = os_avx512 && bit(l7.b, 16);
  f.avx512bw = os_avx512 && bit(l7.b, 30);
  f.avx512vl = os_avx512 && bit(l7.b, 31);
  f.avx512_vnni = os_avx512 && bit(l7.c, 11);
  f.avx512_fp16 = os_avx512 && bit(l7.d, 23);
  f.avx512_bf16 = os_avx512 && bit(l7s1.a, 5);
  f.avx_vnni = os_avx && bit(l7s1.a, 4);
  f.amx_bf16 = os_amx && bit(l7.d, 22);
  f.amx_tile = os_amx && bit(l7.d, 24);
  f.amx_int8 = os_amx && bit(l7.d, 25);
  return f;
}
#else
CpuFeatures detect() { return {}; }
#endif

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = detect();
  return f;
}

bool amx_tiles_permitted() {
  static const bool ok = [] {
    if (!cpu_features().amx_tile) return false;
#if defined(__linux__) && defined(SYS_arch_prctl)
    constexpr int kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
    return false;
#endif
  }();
  return ok;
}

std::string cpu_model_name() {
#if defined(__x86_64__) || defined(__i386__)
  if (cpuid(0x80000000u, 0).a >= 0x80000004u) {
    char brand[49] = {0};
    for (uint32_t i = 0; i < 3; ++i) {
      const Regs r = cpuid(0x80000002u + i, 0);
      std::memcpy(brand + 16 * i, &r, 16);
    }
    std::string s(brand);
    const auto b = s.find_first_not_of(' ');
    const auto e = s.find_last_not_of(' ');
    if (b != std::string::npos) return s.substr(b, e - b + 1);
  }
#endif
  return "unknown CPU";
}

}  // namespace diffq::backend::cpu
