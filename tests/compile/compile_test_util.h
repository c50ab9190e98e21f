// Shared helpers of the compile tests.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "compile/compile_options.h"
#include "diffq/tensor.h"

namespace compile_test {

// Deterministic inputs: xorshift values, uniform in [-scale, scale].
inline diffq::Tensor randn(const diffq::Shape& s, uint64_t seed, diffq::DType dt = diffq::DType::f32,
                           float scale = 2.f) {
  std::vector<float> v(size_t(diffq::shape_numel(s)));
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (float& f : v) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    f = float(double(x % 20001) / 10000.0 - 1.0) * scale;
  }
  return diffq::Tensor::from_vector(v, s, dt);
}

// max |a - b| / max |b| (a and b same shape)
inline double max_rel(const diffq::Tensor& a, const diffq::Tensor& b) {
  if (a.shape() != b.shape()) return INFINITY;
  const auto x = a.to_f64_vector(), y = b.to_f64_vector();
  double num = 0, den = 1e-30;
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i]) != std::isnan(y[i])) return INFINITY;
    num = std::max(num, std::fabs(x[i] - y[i]));
    den = std::max(den, std::fabs(y[i]));
  }
  return num / den;
}

// Same shape, dtype and bytes.
inline bool same_bits(const diffq::Tensor& a, const diffq::Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  const diffq::Tensor x = a.contiguous(), y = b.contiguous();
  return std::memcmp(x.data_ptr(), y.data_ptr(), size_t(x.numel()) * diffq::dtype_size(x.dtype())) == 0;
}

// Every pass on, then each pass off in turn, then all off.
inline std::vector<std::pair<std::string, diffq::compile::CompileOptions>> pass_settings() {
  std::vector<std::pair<std::string, diffq::compile::CompileOptions>> out;
  out.emplace_back("all-on", diffq::compile::CompileOptions{});
  for (const char* p : {"dce", "cse", "fuse", "fuse_norm", "fuse_epilogue", "fuse_dequant", "fuse_rope", "elide_concat", "plan", "inplace",
                        "all"})
    out.emplace_back(std::string("no-") + p, diffq::compile::disable_passes({}, p, "test"));
  for (auto& [n, o] : out) o.fullgraph = true;  // a capture failure must fail the test, not fall back
  return out;
}

}  // namespace compile_test
