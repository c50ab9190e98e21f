// max |a - b| / max |b| of two tensors in float64 (any dtype and layout; shapes must match), the model tests'
// relative error against a reference tensor.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "diffq/tensor.h"

namespace diffq::testing {

inline double max_rel(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape()) << a.str() << " vs " << b.str();
  const auto x = a.to_f64_vector(), y = b.to_f64_vector();
  if (x.size() != y.size()) return INFINITY;
  double num = 0, den = 1e-30;
  for (size_t i = 0; i < x.size(); ++i) {
    num = std::max(num, std::fabs(x[i] - y[i]));
    den = std::max(den, std::fabs(y[i]));
  }
  return num / den;
}

}  // namespace diffq::testing
