// The tiled dequantize-in-GEMM driver against the dense linear op on the same (dequantized) weight.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "core/random.h"
#include "diffq/error.h"
#include "ops/ops.h"
#include "quant/dequant_linear.h"

namespace {

using diffq::DType;
using diffq::Tensor;

double max_rel(const Tensor& a, const Tensor& b) {
  const auto av = a.to_f32_vector(), bv = b.to_f32_vector();
  EXPECT_EQ(av.size(), bv.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < av.size(); ++i) {
    num = std::max(num, std::abs(double(av[i]) - bv[i]));
    den = std::max(den, std::abs(double(bv[i])));
  }
  return num / den;
}

// A "scheme" whose rows are W * 0.5 (so the callback really is what the driver multiplies by).
struct Halved {
  Tensor w;  // [N, K] f32 contiguous
  void operator()(int64_t n0, int64_t n1, float* dst) const {
    const int64_t K = w.shape()[1];
    const float* p = w.data<float>();
    for (int64_t i = n0 * K; i < n1 * K; ++i) *dst++ = p[i] * 0.5f;
  }
};

TEST(DequantTileLinear, EqualsDenseLinearForOddShapesAndDtypes) {
  diffq::Generator g(3);
  for (auto [M, N, K] : {std::tuple{1, 7, 5}, {3, 300, 33}, {17, 1000, 600}, {0, 4, 8}}) {
    Tensor w = diffq::randn_tensor({N, K}, g, DType::f32);
    Tensor x = diffq::randn_tensor({1, M, K}, g, DType::f32);
    Tensor b = diffq::randn_tensor({N}, g, DType::f32);
    Halved h{w};
    const Tensor wh = diffq::ops::mul_scalar(w, 0.5);
    for (DType dt : {DType::f32, DType::bf16}) {
      const Tensor xd = x.to(dt);
      Tensor y = diffq::quant::dequant_tile_linear(xd, b, N, K, h);
      Tensor ref = diffq::ops::linear(xd.to(DType::f32), wh, b);
      EXPECT_EQ(y.dtype(), dt);
      EXPECT_EQ(y.shape(), (diffq::Shape{1, M, N}));
      if (M > 0) {
        EXPECT_LE(max_rel(y, ref), dt == DType::f32 ? 1e-5 : 8e-3) << M << "x" << N << "x" << K;
      }
    }
    // Without bias, and with a transposed (non-contiguous) input.
    Tensor xt = diffq::randn_tensor({K, M}, g, DType::f32).transpose(0, 1);
    if (M > 0) {
      EXPECT_LE(max_rel(diffq::quant::dequant_tile_linear(xt, {}, N, K, h), diffq::ops::linear(xt, wh)), 1e-5);
    }
  }
  EXPECT_GE(diffq::quant::dequant_tile_rows(100000, 3072), 16);
  EXPECT_LE(diffq::quant::dequant_tile_rows(100000, 3072) * 3072 * 4, 16 << 20);
  EXPECT_LT(diffq::quant::dequant_tile_rows(12288, 3072), 12288);  // a FLUX.1 MLP weight is never whole
}

TEST(DequantTileLinear, RejectsMismatchedShapes) {
  Halved h{Tensor::zeros({4, 8}, DType::f32)};
  EXPECT_THROW(diffq::quant::dequant_tile_linear(Tensor::zeros({2, 7}, DType::f32), {}, 4, 8, h), diffq::Error);
  EXPECT_THROW(diffq::quant::dequant_tile_linear(Tensor::zeros({2, 8}, DType::f32), Tensor::zeros({5}, DType::f32), 4, 8, h),
               diffq::Error);
  EXPECT_THROW(diffq::quant::dequant_tile_linear(Tensor::zeros({2, 8}, DType::i32), {}, 4, 8, h), diffq::Error);
}

}  // namespace
