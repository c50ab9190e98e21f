// The CPU's tiled dequantize-in-GEMM driver (backend/cpu/quant/tile_linear.h) against the dense linear op
// on the same (dequantized) weight.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/cpu/bf16_dot_gemm.h"
#include "backend/cpu/quant/tile_linear.h"
#include "backend/cpu/simd_targets.h"
#include "core/random.h"
#include "diffq/error.h"
#include "ops/ops.h"

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
      Tensor y = diffq::backend::cpu::dequant_tile_linear(xd, b, N, K, h);
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
      EXPECT_LE(max_rel(diffq::backend::cpu::dequant_tile_linear(xt, {}, N, K, h), diffq::ops::linear(xt, wh)), 1e-5);
    }
  }
  EXPECT_GE(diffq::backend::cpu::dequant_tile_rows(100000, 3072), 16);
  EXPECT_LE(diffq::backend::cpu::dequant_tile_rows(100000, 3072) * 3072 * 4, 16 << 20);
  EXPECT_LT(diffq::backend::cpu::dequant_tile_rows(12288, 3072), 12288);  // a FLUX.1 MLP weight is never whole
}

// A bf16 input on a CPU with the bf16 dot product: tiles whose dequantized values are all exact bf16
// (W rounded to bf16, as GGUF and bitsandbytes 4-bit do for a bf16 compute dtype) run the bf16 GEMM
// (other bits than the f32 GEMM, run with DIFFQ_SIMD_TARGET=AVX2's restriction, within the f32
// accumulation bound of the f64 reference); any other tile keeps the f32 GEMM bit for bit. Several
// tiles (N past dequant_tile_rows), bias, bf16 output rounding.
TEST(DequantTileLinear, Bf16InputWithBf16ExactTilesRunsTheBf16Gemm) {
  namespace cpu = diffq::backend::cpu;
  diffq::Generator g(5);
  const int64_t M = 13, K = 3000, N = diffq::backend::cpu::dequant_tile_rows(100000, K) + 40;
  const Tensor w_exact = diffq::randn_tensor({N, K}, g, DType::f32).to(DType::bf16).to(DType::f32);
  const Tensor w_any = diffq::randn_tensor({N, K}, g, DType::f32);
  const Tensor x = diffq::randn_tensor({1, M, K}, g, DType::f32).to(DType::bf16);
  const Tensor b = diffq::randn_tensor({N}, g, DType::f32);
  auto rows_of = [](const Tensor& w) {
    return [w](int64_t n0, int64_t n1, float* dst) {
      const int64_t K = w.shape()[1];
      std::memcpy(dst, w.data<float>() + n0 * K, size_t((n1 - n0) * K) * sizeof(float));
    };
  };
  // The f32 GEMM's path: the bf16 dot product turned off by a lower SIMD target (the f32 GEMM's kernel,
  // OpenBLAS or oneDNN, does not depend on it).
  const auto supported = cpu::simd_targets_supported();
  const bool can_force = std::find(supported.begin(), supported.end(), "AVX2") != supported.end();
  auto run = [&](const Tensor& w, bool f32_path) {
    if (f32_path && can_force) cpu::force_simd_target("AVX2");
    Tensor y = diffq::backend::cpu::dequant_tile_linear(x, b, N, K, rows_of(w));
    cpu::force_simd_target("");
    return y;
  };
  auto bits = [](const Tensor& t) { return t.to_f32_vector(); };
  // Inexact tiles: the f32 GEMM, bit for bit.
  EXPECT_EQ(bits(run(w_any, false)), bits(run(w_any, true)));
  // Exact tiles: the same products; against the reference in f32 (before the bf16 output rounding).
  const Tensor ref = diffq::ops::linear(x.to(DType::f32), w_exact, b);
  const Tensor y = run(w_exact, false);
  EXPECT_EQ(y.dtype(), DType::bf16);
  EXPECT_LE(max_rel(y, ref), 8e-3);
  if (cpu::bf16_dot_gemm_usable() && can_force)
    EXPECT_NE(bits(y), bits(run(w_exact, true))) << "the bf16 GEMM did not run";
}

TEST(DequantTileLinear, RejectsMismatchedShapes) {
  Halved h{Tensor::zeros({4, 8}, DType::f32)};
  EXPECT_THROW(diffq::backend::cpu::dequant_tile_linear(Tensor::zeros({2, 7}, DType::f32), {}, 4, 8, h), diffq::Error);
  EXPECT_THROW(diffq::backend::cpu::dequant_tile_linear(Tensor::zeros({2, 8}, DType::f32), Tensor::zeros({5}, DType::f32), 4, 8, h),
               diffq::Error);
  EXPECT_THROW(diffq::backend::cpu::dequant_tile_linear(Tensor::zeros({2, 8}, DType::i32), {}, 4, 8, h), diffq::Error);
}

}  // namespace
