// Seeded test tensors: N(0, 0.5^2) values rounded to the dtype, and a 16-bit tensor's raw bits (for
// bit-for-bit comparisons of bf16 / f16 results).
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "diffq/tensor.h"

namespace diffq::testing {

inline Tensor randn(const Shape& s, uint32_t seed, DType dt) {
  std::mt19937 g(seed);
  std::normal_distribution<float> n(0.f, 1.f);
  std::vector<float> v(size_t(shape_numel(s)));
  for (float& x : v) x = n(g) * 0.5f;
  return Tensor::from_vector(v, s, dt);
}

inline std::vector<uint16_t> bits16(const Tensor& t) {
  const Tensor c = t.contiguous();
  return std::vector<uint16_t>(c.data<uint16_t>(), c.data<uint16_t>() + c.numel());
}

}  // namespace diffq::testing
