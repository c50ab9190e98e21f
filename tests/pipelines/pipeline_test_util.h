// Comparisons shared by the pipeline tests: relative error of tensors and PSNR of uint8 images.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "diffq/tensor.h"

namespace diffq::testing {

// max |a - b| / max |b| (shapes must match).
inline double rel_err(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  const auto av = a.to_f32_vector(), bv = b.to_f32_vector();
  if (av.size() != bv.size()) return 1e30;
  double num = 0, den = 0;
  for (size_t i = 0; i < av.size(); ++i) {
    num = std::max(num, std::abs(double(av[i]) - double(bv[i])));
    den = std::max(den, std::abs(double(bv[i])));
  }
  return num / std::max(den, 1e-30);
}

// PSNR in dB of two uint8 images (infinity when identical).
inline double psnr_u8(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  const auto av = a.to_f32_vector(), bv = b.to_f32_vector();
  if (av.size() != bv.size()) return 0;
  double se = 0;
  for (size_t i = 0; i < av.size(); ++i) se += (double(av[i]) - bv[i]) * (double(av[i]) - bv[i]);
  if (se == 0) return std::numeric_limits<double>::infinity();
  return 10 * std::log10(255.0 * 255.0 / (se / double(av.size())));
}

}  // namespace diffq::testing
