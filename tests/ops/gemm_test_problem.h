// The GEMM problems of the CPU GEMM tests (test_sgemm_kernel.cpp, test_onednn_gemm.cpp): operands with
// padded row strides in f32 and bf16 form, checked against the f64 reference (sgemm_reference) within a
// few f32 roundings of the products' magnitudes, padding untouched; and GemmParts that deliver each part
// into a scratch tile.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/gemm.h"

namespace gemm_test {

namespace cpu = diffq::backend::cpu;

struct Dims {
  int64_t m, n, k;
};

inline uint16_t bf16_bits(float f) {  // round to nearest even (finite inputs)
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
inline float from_bf16(uint16_t h) {
  const uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Operands of C[m, n] = alpha * op(A) @ op(B) + beta * C with padded row strides, f32 and bf16 forms
// (the f32 form holds the bf16 values when `bf16_values`).
struct Problem {
  bool ta, tb;
  Dims d;
  float alpha, beta;
  int64_t lda, ldb, ldc;
  std::vector<float> a, b, c0;
  std::vector<uint16_t> a16, b16;

  Problem(bool ta_, bool tb_, Dims d_, float alpha_, float beta_, uint32_t seed, bool bf16_values = false)
      : ta(ta_), tb(tb_), d(d_), alpha(alpha_), beta(beta_) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    const int64_t a_rows = ta ? d.k : d.m, a_cols = ta ? d.m : d.k;
    const int64_t b_rows = tb ? d.n : d.k, b_cols = tb ? d.k : d.n;
    lda = a_cols + 3;
    ldb = b_cols + 2;
    ldc = d.n + 5;
    auto fill = [&](std::vector<float>& v, std::vector<uint16_t>& h, int64_t rows, int64_t ld) {
      v.assign(size_t(std::max<int64_t>(rows, 1) * ld), 0.f);
      h.assign(v.size(), 0);
      for (size_t i = 0; i < v.size(); ++i) {
        h[i] = bf16_bits(u(rng));
        v[i] = bf16_values ? from_bf16(h[i]) : u(rng);
      }
    };
    fill(a, a16, a_rows, lda);
    fill(b, b16, b_rows, ldb);
    c0.assign(size_t(d.m * ldc), 0.f);
    for (auto& x : c0) x = beta == 0.f ? std::numeric_limits<float>::quiet_NaN() : u(rng);
  }

  float av(int64_t i, int64_t p) const { return ta ? a[size_t(p * lda + i)] : a[size_t(i * lda + p)]; }
  float bv(int64_t p, int64_t j) const { return tb ? b[size_t(j * ldb + p)] : b[size_t(p * ldb + j)]; }

  // Checks `c` against the reference: within a few f32 roundings per term of the products' magnitudes,
  // and the padding columns (ldc > n) untouched.
  void check(const std::vector<float>& c, const std::string& what) const {
    std::vector<float> ref = c0;
    cpu::sgemm_reference(ta, tb, d.m, d.n, d.k, alpha, a.data(), lda, b.data(), ldb, beta, ref.data(), ldc);
    int bad = 0;
    for (int64_t i = 0; i < d.m && bad < 5; ++i) {
      for (int64_t j = 0; j < d.n; ++j) {
        double mag = 0;
        for (int64_t p = 0; p < d.k; ++p) mag += std::fabs(double(av(i, p)) * bv(p, j));
        const double cin = beta == 0.f ? 0.0 : std::fabs(double(beta) * c0[size_t(i * ldc + j)]);
        const double tol = double(d.k + 4) * std::ldexp(1.0, -23) * (std::fabs(alpha) * mag + cin) + 1e-30;
        const float got = c[size_t(i * ldc + j)], want = ref[size_t(i * ldc + j)];
        if (!(std::fabs(double(got) - want) <= tol)) {
          ADD_FAILURE() << what << " at (" << i << ", " << j << "): " << got << " vs " << want << " (tol " << tol << ")";
          if (++bad >= 5) break;
        }
      }
      for (int64_t j = d.n; j < ldc; ++j) {
        const float got = c[size_t(i * ldc + j)], was = c0[size_t(i * ldc + j)];
        if (std::memcmp(&got, &was, 4) != 0) {
          ADD_FAILURE() << what << ": padding (" << i << ", " << j << ") written";
          ++bad;
          break;
        }
      }
    }
  }

  std::string name() const {
    return std::string(ta ? "T" : "N") + (tb ? "T" : "N") + " m=" + std::to_string(d.m) + " n=" +
           std::to_string(d.n) + " k=" + std::to_string(d.k) + " alpha=" + std::to_string(alpha) +
           " beta=" + std::to_string(beta);
  }
};

// C computed part by part into a separate scratch tile per part (as compile's epilogue fusion may).
inline cpu::GemmParts scratch_parts(std::vector<float>& c, int64_t ldc, float beta, std::vector<std::vector<float>>& tiles) {
  cpu::GemmParts parts;
  parts.begin = [&c, ldc, beta, &tiles](int64_t r0, int64_t r1, int64_t c0, int64_t c1, int64_t* ld) {
    static std::mutex mu;
    std::lock_guard<std::mutex> lock(mu);
    tiles.emplace_back(size_t((r1 - r0) * (c1 - c0 + 1)));
    std::vector<float>& t = tiles.back();
    *ld = c1 - c0 + 1;
    for (int64_t i = r0; i < r1; ++i)
      for (int64_t j = c0; j < c1; ++j) t[size_t((i - r0) * *ld + j - c0)] = beta == 0.f ? 0.f : c[size_t(i * ldc + j)];
    return t.data();
  };
  parts.end = [&c, ldc](int64_t r0, int64_t r1, int64_t c0, int64_t c1, const float* p, int64_t ld) {
    for (int64_t i = r0; i < r1; ++i)
      for (int64_t j = c0; j < c1; ++j) c[size_t(i * ldc + j)] = p[(i - r0) * ld + j - c0];
  };
  return parts;
}

}  // namespace gemm_test
