// The accuracy a bf16 linear owes whatever order its f32 sums take (oneDNN's kernels block K differently
// per ISA, shape and weight layout): one output against the exact f64 value.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

namespace diffq::testing {

// y = bf16(x . w + bias) computed with f32 accumulation and one rounding to bf16: within half a bf16 ulp
// of the exact value plus the f32 summation bound (k + 1) 2^-24 (sum |x_e w_e| + |bias|). x, w: k values.
inline ::testing::AssertionResult bf16_linear_output_near_exact(double y, const float* x, const float* w, int64_t k,
                                                                double bias) {
  double exact = bias, mag = std::abs(bias);
  for (int64_t e = 0; e < k; ++e) {
    const double t = double(x[e]) * double(w[e]);
    exact += t;
    mag += std::abs(t);
  }
  const double half_ulp = std::ldexp(1.0, std::ilogb(exact == 0 ? 1e-30 : exact) - 8);
  const double bound = half_ulp + double(k + 1) * std::ldexp(mag, -24);
  if (std::abs(y - exact) <= bound) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "got " << y << ", exact " << exact << ", bound " << bound;
}

}  // namespace diffq::testing
