// torch's scaled_dot_product_attention outputs on masked and keyless rows
// (tests/fixtures/ops/sdpa_masked.safetensors, tools/reference/make_sdpa_fixtures.py), checked against
// diffq's sdpa on a device: the CPU test (tests/ops/test_sdpa_torch.cpp) and the CUDA one
// (tests/cuda/test_cuda_sdpa_torch.cpp) share this.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "common/source_dir.h"
#include "diffq/tensor.h"
#include "io/safetensors.h"
#include "ops/ops.h"

namespace diffq::testing {

inline void expect_sdpa_matches_torch(Device dev) {
  const auto f = io::SafetensorsFile::open(fixtures_dir() / "ops" / "sdpa_masked.safetensors");
  int cases = 0, zero_rows = 0;
  for (const std::string name : {"additive_f32", "bool_f32", "no_keys_f32", "additive_bf16", "bool_bf16", "no_keys_bf16"}) {
    SCOPED_TRACE(name);
    const Tensor q = f.tensor(name + ".q").to(dev), k = f.tensor(name + ".k").to(dev), v = f.tensor(name + ".v").to(dev);
    const Tensor mask = f.contains(name + ".mask") ? f.tensor(name + ".mask").to(dev) : Tensor();
    const Tensor want_t = f.tensor(name + ".out");
    const Tensor got_t = ops::sdpa(q, k, v, mask).to(Device::cpu());
    ASSERT_EQ(got_t.shape(), want_t.shape());
    ASSERT_EQ(got_t.dtype(), want_t.dtype());
    const std::vector<float> got = got_t.to_f32_vector(), want = want_t.to_f32_vector();
    const bool bf16 = want_t.dtype() == DType::bf16;
    double scale = 1e-30;
    for (float w : want) scale = std::max(scale, double(std::abs(w)));
    const int64_t D = want_t.size(-1);
    for (size_t row = 0; row * D < want.size(); ++row) {
      bool all_zero = true;
      for (int64_t d = 0; d < D; ++d) all_zero &= want[row * D + d] == 0.0f;
      zero_rows += all_zero;
      for (int64_t d = 0; d < D; ++d) {
        const size_t i = row * D + d;
        ASSERT_FALSE(std::isnan(got[i])) << "row " << row << " is NaN; torch gives " << want[i];
        if (all_zero)  // a fully masked row (or no keys): exactly 0, as torch
          ASSERT_EQ(got[i], 0.0f) << "row " << row;
        else  // bf16: torch and diffq both accumulate in f32 and round once; allow a rounding apart
          ASSERT_LE(std::abs(double(got[i]) - want[i]) / scale, bf16 ? 1e-2 : 2e-6) << "row " << row << " d " << d;
      }
    }
    ++cases;
  }
  EXPECT_EQ(cases, 6);
  EXPECT_GT(zero_rows, 20);  // the fixture's masked rows were found (not a vacuous check)
}

}  // namespace diffq::testing
