// Shared helpers of the CUDA tests (labelled `gpu`: ctest runs them only where a GPU is present; run
// by hand without one, every test skips).
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "backend/cuda/runtime.h"
#include "diffq/tensor.h"

#define DIFFQ_REQUIRE_GPU()                                                         \
  do {                                                                              \
    if (::diffq::backend::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device present"; \
  } while (0)

namespace diffq::cudatest {

inline Device gpu() { return Device::cuda(0); }

// The raw bytes of a CPU tensor's elements in row-major order (any view).
inline std::vector<uint8_t> bytes_of(const Tensor& t) {
  EXPECT_TRUE(t.device().is_cpu());
  const Tensor c = t.contiguous();
  std::vector<uint8_t> out(c.nbytes());
  if (!out.empty()) std::memcpy(out.data(), c.data_ptr(), out.size());
  return out;
}

// A CPU tensor whose element bits are random (every pattern, NaNs and denormals included).
inline Tensor random_bits(const Shape& shape, DType dt, uint32_t seed) {
  Tensor t = Tensor::empty(shape, dt);
  std::mt19937 rng(seed);
  auto* p = static_cast<uint8_t*>(t.data_ptr());
  for (size_t i = 0; i < t.nbytes(); ++i) p[i] = uint8_t(rng());
  if (dt == DType::boolean)
    for (size_t i = 0; i < t.nbytes(); ++i) p[i] &= 1;
  return t;
}

// A CPU tensor of uniform values in +-[lo, hi], rounded to dt.
inline Tensor random_values(const Shape& shape, DType dt, uint32_t seed, float lo = 0.25f,
                            float hi = 4.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> mag(lo, hi);
  std::vector<float> v(size_t(shape_numel(shape)));
  for (float& x : v) x = (rng() & 1 ? -1.0f : 1.0f) * mag(rng);
  return Tensor::from_vector(v, shape, dt);
}

// 0, 1, 2, ... (from `first`), float32: every element distinct, so a view that reads the wrong one is
// caught (the host-side indexing tests).
inline Tensor arange_f32(const Shape& s, float first = 0.0f) {
  std::vector<float> v(size_t(shape_numel(s)));
  std::iota(v.begin(), v.end(), first);
  return Tensor::from_vector(v, s, DType::f32);
}

}  // namespace diffq::cudatest
