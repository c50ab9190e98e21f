// Deterministic test data shared by the kernel tests: n floats uniform in [-scale, scale) from a 64-bit
// LCG (fast: the blocked GEMM cases need tens of millions of values).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace diffq::testing {

inline std::vector<float> uniform_vec(size_t n, uint64_t seed, float scale = 1.0f) {
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  std::vector<float> v(n);
  for (auto& x : v) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x = float(int32_t(s >> 32)) * (scale / 2147483648.0f);
  }
  return v;
}

}  // namespace diffq::testing
