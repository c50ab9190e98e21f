// The CPU attention kernel's tile sizes are a tuning choice (backend/cpu/tuning.h, picked by the
// autotuner): every tiling, including tiles smaller than the sequences and not dividing them, gives
// softmax(Q K^T / sqrt(D)) V within f32 rounding of an f64 computation, with and without a mask.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "backend/cpu/threads.h"
#include "backend/cpu/tuning.h"
#include "common/uniform_vec.h"
#include "ops/ops.h"

using namespace diffq;
namespace cpu = diffq::backend::cpu;

namespace {

// out[b, h, i, :] in f64 for [B, H, S, D] row-major inputs; mask [Sq, Sk] additive (may be empty).
std::vector<double> naive_sdpa(const std::vector<float>& q, const std::vector<float>& k,
                               const std::vector<float>& v, const std::vector<float>& mask, int64_t BH,
                               int64_t Sq, int64_t Sk, int64_t D) {
  std::vector<double> out(size_t(BH * Sq * D));
  std::vector<double> s(static_cast<size_t>(Sk));
  for (int64_t bh = 0; bh < BH; ++bh)
    for (int64_t i = 0; i < Sq; ++i) {
      double mx = -INFINITY;
      for (int64_t j = 0; j < Sk; ++j) {
        double d = 0;
        for (int64_t e = 0; e < D; ++e) d += double(q[size_t((bh * Sq + i) * D + e)]) * k[size_t((bh * Sk + j) * D + e)];
        s[size_t(j)] = d / std::sqrt(double(D)) + (mask.empty() ? 0.0 : mask[size_t(i * Sk + j)]);
        mx = std::max(mx, s[size_t(j)]);
      }
      double l = 0;
      for (auto& x : s) l += (x = std::exp(x - mx));
      for (int64_t e = 0; e < D; ++e) {
        double o = 0;
        for (int64_t j = 0; j < Sk; ++j) o += s[size_t(j)] * v[size_t((bh * Sk + j) * D + e)];
        out[size_t((bh * Sq + i) * D + e)] = o / l;
      }
    }
  return out;
}

TEST(SdpaTiles, EveryTilingMatchesTheF64Result) {
  const int64_t B = 1, H = 3, Sq = 70, Sk = 301, D = 16;
  using diffq::testing::uniform_vec;
  const auto q = uniform_vec(size_t(B * H * Sq * D), 1, 2.0f), k = uniform_vec(size_t(B * H * Sk * D), 2, 2.0f),
             v = uniform_vec(size_t(B * H * Sk * D), 3, 2.0f), m = uniform_vec(size_t(Sq * Sk), 4, 2.0f);
  const Tensor tq = Tensor::from_vector(q, {B, H, Sq, D}), tk = Tensor::from_vector(k, {B, H, Sk, D}),
               tv = Tensor::from_vector(v, {B, H, Sk, D}), tm = Tensor::from_vector(m, {Sq, Sk});
  cpu::set_num_threads(2);
  for (const bool masked : {false, true}) {
    const auto ref = naive_sdpa(q, k, v, masked ? m : std::vector<float>{}, B * H, Sq, Sk, D);
    for (const auto& [bq, bk] : {std::pair<int64_t, int64_t>{128, 2048}, {16, 64}, {7, 33}, {1, 1}, {70, 301}}) {
      cpu::Tuning t;
      t.attn_bq = bq;
      t.attn_bk = bk;
      cpu::ScopedTuning scope(t);
      const Tensor o = masked ? ops::sdpa(tq, tk, tv, tm) : ops::sdpa(tq, tk, tv);
      const auto got = o.to_f32_vector();
      ASSERT_EQ(got.size(), ref.size());
      double worst = 0;
      for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(got[i] - ref[i]));
      EXPECT_LT(worst, 2e-6) << "tiles " << bq << " x " << bk << (masked ? " masked" : "");
    }
  }
  cpu::set_num_threads(0);
}

}  // namespace
