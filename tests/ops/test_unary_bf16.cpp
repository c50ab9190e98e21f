// The CPU's bf16 unary op against the same op on float32 copies rounded to bf16 afterwards (the f32 rows'
// arithmetic, then the cast's round to nearest even), bit for bit: every UnaryFn, rows longer than the
// staging chunks with a vector tail, NaN, infinities, signed zeros; and a strided bf16 view giving the
// same bits. Every one of the 65536 bf16 values on every SIMD target this CPU runs (the bf16 op and
// the linears' in-place activation rows read a table of the function built per target: row_kernels.h
// bf16_unary_table).
// GELU (tanh) computed as x / (1 + exp(-2u)) against the f64 definition, its edges as torch's formula.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "backend/cpu/row_kernels.h"
#include "backend/cpu/simd_targets.h"
#include "core/random.h"
#include "expect_bits.h"
#include "ops/ops.h"

namespace diffq {
namespace {

Tensor operand(Generator& g, const Shape& s, double scale) {
  Tensor t = ops::mul_scalar(randn_tensor(s, g, DType::f32), scale).to(DType::bf16).contiguous();
  auto* p = static_cast<uint16_t*>(t.data_ptr());
  const uint16_t specials[] = {0x7fc0, 0x7f80, 0xff80, 0x0000, 0x8000, 0x3f80, 0xc120, 0x0001, 0xc2c8, 0x42c8};
  for (size_t i = 0; i < sizeof(specials) / sizeof(specials[0]); ++i) p[i * 37] = specials[i];
  return t;
}

constexpr ops::UnaryFn kAll[] = {ops::UnaryFn::silu, ops::UnaryFn::gelu_tanh, ops::UnaryFn::gelu_erf,
                                 ops::UnaryFn::quick_gelu, ops::UnaryFn::exp, ops::UnaryFn::neg,
                                 ops::UnaryFn::sqrt, ops::UnaryFn::rsqrt, ops::UnaryFn::tanh,
                                 ops::UnaryFn::sigmoid, ops::UnaryFn::sin, ops::UnaryFn::cos,
                                 ops::UnaryFn::abs, ops::UnaryFn::square};

TEST(UnaryBf16, EqualsTheFloat32OpRoundedBitwise) {
  Generator g(5);
  // 3 x 8197: several of the 4096-element staging chunks per row and a vector tail.
  const Tensor x = operand(g, {3, 8197}, 4.0);
  for (const ops::UnaryFn fn : kAll) {
    const std::string what = "unary " + std::to_string(int(fn));
    expect_bits_equal(ops::unary(x, fn), ops::unary(x.to(DType::f32), fn).to(DType::bf16), what);
    // a strided view (the staging rows' strided loads): the same bits
    const Tensor xt = x.transpose(0, 1);
    expect_bits_equal(ops::unary(xt, fn), ops::unary(x, fn).transpose(0, 1), what + " (strided)");
  }
}

TEST(UnaryBf16, EveryBf16ValueOnEverySimdTarget) {
  // All 65536 bit patterns (NaNs, infinities, subnormals, both zeros), in place and into a new tensor, after
  // switching the dispatch between targets (each target's table is its own row kernels').
  std::vector<uint16_t> bits(1 << 16);
  for (size_t i = 0; i < bits.size(); ++i) bits[i] = uint16_t(i);
  Tensor x = Tensor::empty({int64_t(bits.size())}, DType::bf16);
  std::memcpy(x.data_ptr(), bits.data(), bits.size() * 2);
  const char* env = std::getenv("DIFFQ_SIMD_TARGET");
  const std::string restore = env ? env : "";
  for (const std::string& target : backend::cpu::simd_targets_supported()) {
    backend::cpu::force_simd_target(target);
    for (const ops::UnaryFn fn : kAll) {
      const std::string what = target + " unary " + std::to_string(int(fn));
      const Tensor want = ops::unary(x.to(DType::f32), fn).to(DType::bf16);
      expect_bits_equal(ops::unary(x, fn), want, what);
      Tensor y = x.clone();  // linear_q_act's in-place rows: 256 rows of 250 of 256 elements
      backend::cpu::unary_rows_in_place(fn, DType::bf16, y.data_ptr(), 256, 256, 250);
      const Tensor yv = y.reshape({256, 256}).slice(1, 0, 250), wv = want.reshape({256, 256}).slice(1, 0, 250);
      expect_bits_equal(yv, wv, what + " (in place)");
      expect_bits_equal(y.reshape({256, 256}).slice(1, 250, 256), x.reshape({256, 256}).slice(1, 250, 256),
                        what + " (in place: the columns past the rows untouched)");
    }
  }
  backend::cpu::force_simd_target(restore);
}

double gelu_tanh_f64(double x) {
  const double u = std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x);
  return 0.5 * x * (1.0 + std::tanh(u));
}

TEST(UnaryGeluTanh, WithinTwoUlpsOfTheDefinition) {
  // A dense sweep of [-12, 12] plus wide random values, float32 in and out.
  std::vector<float> xs;
  for (int i = -120000; i <= 120000; ++i) xs.push_back(float(i) * 1e-4f);
  Generator g(7);
  const Tensor r = ops::mul_scalar(randn_tensor({4096}, g, DType::f32), 30.0).contiguous();
  for (int64_t i = 0; i < r.numel(); ++i) xs.push_back(r.data<float>()[i]);
  const Tensor x = Tensor::from_vector(xs, {int64_t(xs.size())});
  const Tensor y = ops::unary(x, ops::UnaryFn::gelu_tanh).contiguous();
  int64_t worse = 0, first = -1;
  for (size_t i = 0; i < xs.size(); ++i) {
    const double want = gelu_tanh_f64(xs[i]), got = y.data<float>()[i];
    // two ulps of the result, or an absolute 1e-7 where it is below the f32 tanh's resolution of
    // 1 + tanh(u) (torch's formula gives 0 or multiples of ~6e-8 * x there)
    const double tol = std::max(2.0 * std::ldexp(1.0, std::ilogb(std::max(std::fabs(want), 1e-30)) - 23), 1e-7);
    if (!(std::fabs(got - want) <= tol)) {
      if (first < 0) first = int64_t(i);
      ++worse;
    }
  }
  EXPECT_EQ(worse, 0) << "first at x = " << (first >= 0 ? xs[size_t(first)] : 0.f) << ": got "
                      << (first >= 0 ? y.data<float>()[first] : 0.f) << ", f64 "
                      << (first >= 0 ? gelu_tanh_f64(xs[size_t(first)]) : 0.0);
}

TEST(UnaryGeluTanh, EdgesAsTorchsFormula) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  // 0.5 x (1 + tanh(u)): +inf -> +inf, -inf -> -inf * 0 = NaN, NaN -> NaN, tanh(u) = -1 in f32 for very
  // negative x -> 0 * x = -0, +-0 -> +-0
  const std::vector<float> xs = {inf, -inf, nan, -20.f, -1e30f, 0.f, -0.f, 1e30f};
  const Tensor y = ops::unary(Tensor::from_vector(xs, {int64_t(xs.size())}), ops::UnaryFn::gelu_tanh).contiguous();
  const float* p = y.data<float>();
  EXPECT_EQ(p[0], inf);
  EXPECT_TRUE(std::isnan(p[1]));
  EXPECT_TRUE(std::isnan(p[2]));
  EXPECT_EQ(p[3], 0.f);
  EXPECT_TRUE(std::signbit(p[3]));
  EXPECT_EQ(p[4], 0.f);
  EXPECT_TRUE(std::signbit(p[4]));
  EXPECT_EQ(p[5], 0.f);
  EXPECT_FALSE(std::signbit(p[5]));
  EXPECT_EQ(p[6], 0.f);
  EXPECT_TRUE(std::signbit(p[6]));
  EXPECT_EQ(p[7], 1e30f);
}

}  // namespace
}  // namespace diffq
