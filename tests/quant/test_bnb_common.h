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

// ---- SHA-256 (FIPS 180-4) -----------------------------------------------------------------------------
class Sha256 {
 public:
  Sha256() { reset(); }
  void reset() {
    h_ = {0x6a09e667u, 0xbb67ae85u, 0x3c6ef372u, 0xa54ff53au, 0x510e527fu, 0x9b05688cu, 0x1f83d9abu, 0x5be0cd19u};
    len_ = 0;
    fill_ = 0;
  }
  void update(const void* data, size_t n) {
    const uint8_t* p = static_cast<const uint8_t*>(data);
    len_ += n;
    while (n > 0) {
      const size_t take = std::min(n, size_t(64) - fill_);
      std::memcpy(buf_.data() + fill_, p, take);
      fill_ += take;
      p += take;
      n -= take;
      if (fill_ == 64) {
        block(buf_.data());
        fill_ = 0;
      }
    }
  }
  std::string hex() {
    const uint64_t bits = len_ * 8;
    const uint8_t one = 0x80, zero = 0;
    update(&one, 1);
    while (fill_ != 56) update(&zero, 1);
    uint8_t lenb[8];
    for (int i = 0; i < 8; ++i) lenb[i] = uint8_t(bits >> (56 - 8 * i));
    update(lenb, 8);
    std::string s;
    char b[9];
    for (uint32_t v : h_) {
      std::snprintf(b, sizeof(b), "%08x", v);
      s += b;
    }
    reset();
    return s;
  }

 private:
  static uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }
  void block(const uint8_t* p) {
    static const uint32_t k[64] = {
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5, 0xd807aa98,
        0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
        0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8,
        0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
        0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819,
        0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
        0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
        0xc67178f2};
    uint32_t w[64];
    for (int i = 0; i < 16; ++i)
      w[i] = uint32_t(p[4 * i]) << 24 | uint32_t(p[4 * i + 1]) << 16 | uint32_t(p[4 * i + 2]) << 8 | p[4 * i + 3];
    for (int i = 16; i < 64; ++i) {
      const uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
      const uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
      w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = h_[0], b = h_[1], c = h_[2], d = h_[3], e = h_[4], f = h_[5], g = h_[6], h = h_[7];
    for (int i = 0; i < 64; ++i) {
      const uint32_t S1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25);
      const uint32_t ch = (e & f) ^ (~e & g);
      const uint32_t t1 = h + S1 + ch + k[i] + w[i];
      const uint32_t S0 = rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22);
      const uint32_t mj = (a & b) ^ (a & c) ^ (b & c);
      const uint32_t t2 = S0 + mj;
      h = g;
      g = f;
      f = e;
      e = d + t1;
      d = c;
      c = b;
      b = a;
      a = t1 + t2;
    }
    h_[0] += a;
    h_[1] += b;
    h_[2] += c;
    h_[3] += d;
    h_[4] += e;
    h_[5] += f;
    h_[6] += g;
    h_[7] += h;
  }
  std::array<uint32_t, 8> h_{};
  std::array<uint8_t, 64> buf_{};
  uint64_t len_ = 0;
  size_t fill_ = 0;
};

inline std::string sha256(const void* data, size_t n) {
  Sha256 s;
  s.update(data, n);
  return s.hex();
}
inline std::string sha256(const std::vector<uint8_t>& v) { return sha256(v.data(), v.size()); }
inline std::string sha256(const diffq::Tensor& t) {
  const diffq::Tensor c = t.contiguous();
  return sha256(c.data_ptr(), c.nbytes());
}
inline std::string sha256_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) throw std::runtime_error("cannot open " + p.string());
  std::vector<char> data((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  return sha256(data.data(), data.size());
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
