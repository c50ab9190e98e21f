// Shared helpers of the bitsandbytes / quanto tests: fixture access, SHA-256, byte comparisons.
#pragma once

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "common/sha256.h"
#include "diffq/tensor.h"
#include "io/safetensors.h"

namespace bnbtest {

namespace fs = std::filesystem;

inline fs::path fixtures() { return fs::path(DIFFQ_SOURCE_DIR) / "tests" / "fixtures"; }

inline nlohmann::json read_json(const fs::path& p) {
  std::ifstream f(p);
  if (!f) throw std::runtime_error("cannot open " + p.string());
  return nlohmann::json::parse(f);
}

// ---- SHA-256 (tests/common/sha256.h) ---------------------------------------------------------------
inline std::string sha256(const void* data, size_t n) { return diffq::testing::sha256_hex(data, n); }
inline std::string sha256(const std::vector<uint8_t>& v) { return diffq::testing::sha256_hex(v); }
inline std::string sha256(const diffq::Tensor& t) { return diffq::testing::sha256_tensor_hex(t); }
inline std::string sha256_file(const fs::path& p) {
  if (!fs::exists(p)) throw std::runtime_error("cannot open " + p.string());
  return diffq::testing::sha256_file(p);
}

// ---- comparisons -------------------------------------------------------------------------------------
// Same dtype, same element count and identical bytes; the message gives the first differing element.
inline ::testing::AssertionResult same_bytes(const diffq::Tensor& a, const diffq::Tensor& b) {
  if (a.dtype() != b.dtype())
    return ::testing::AssertionFailure() << "dtype " << diffq::dtype_name(a.dtype()) << " vs "
                                         << diffq::dtype_name(b.dtype());
  if (a.numel() != b.numel())
    return ::testing::AssertionFailure() << "numel " << a.numel() << " vs " << b.numel() << " ("
                                         << diffq::shape_str(a.shape()) << " vs " << diffq::shape_str(b.shape()) << ")";
  const diffq::Tensor ac = a.contiguous(), bc = b.contiguous();
  const size_t es = diffq::dtype_size(a.dtype());
  const uint8_t* pa = static_cast<const uint8_t*>(ac.data_ptr());
  const uint8_t* pb = static_cast<const uint8_t*>(bc.data_ptr());
  if (std::memcmp(pa, pb, ac.nbytes()) == 0) return ::testing::AssertionSuccess();
  const auto av = ac.to_f64_vector(), bv = bc.to_f64_vector();
  int64_t bad = 0, first = -1;
  for (int64_t i = 0; i < a.numel(); ++i)
    if (std::memcmp(pa + size_t(i) * es, pb + size_t(i) * es, es) != 0) {
      if (first < 0) first = i;
      ++bad;
    }
  return ::testing::AssertionFailure() << bad << " of " << a.numel() << " elements differ; first at " << first
                                       << ": " << av[size_t(first)] << " vs " << bv[size_t(first)];
}

// As same_bytes, except that a NaN matches any NaN.
inline ::testing::AssertionResult same_bytes_or_both_nan(const diffq::Tensor& a, const diffq::Tensor& b) {
  if (a.dtype() != b.dtype() || a.numel() != b.numel()) return same_bytes(a, b);
  const auto av = a.to_f64_vector(), bv = b.to_f64_vector();
  const diffq::Tensor ac = a.contiguous(), bc = b.contiguous();
  const size_t es = diffq::dtype_size(a.dtype());
  const uint8_t* pa = static_cast<const uint8_t*>(ac.data_ptr());
  const uint8_t* pb = static_cast<const uint8_t*>(bc.data_ptr());
  int64_t bad = 0, first = -1, nans = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    if (std::isnan(av[size_t(i)]) && std::isnan(bv[size_t(i)])) {
      ++nans;
      continue;
    }
    if (std::memcmp(pa + size_t(i) * es, pb + size_t(i) * es, es) != 0) {
      if (first < 0) first = i;
      ++bad;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess() << nans << " NaN";
  return ::testing::AssertionFailure() << bad << " of " << a.numel() << " elements differ; first at " << first
                                       << ": " << av[size_t(first)] << " vs " << bv[size_t(first)];
}

// max |a - b| / max |b| (b the reference).
inline double max_rel(const diffq::Tensor& a, const diffq::Tensor& b) {
  const auto av = a.to_f64_vector(), bv = b.to_f64_vector();
  EXPECT_EQ(av.size(), bv.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < av.size() && i < bv.size(); ++i) {
    num = std::max(num, std::abs(av[i] - bv[i]));
    den = std::max(den, std::abs(bv[i]));
  }
  return den > 0 ? num / den : num;
}

}  // namespace bnbtest
