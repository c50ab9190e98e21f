// ops::rms_norm_rope against the ops it stands for, bit for bit: rope(concat([rms_norm(x_i, w_i), ...], 1), cos,
// sin) (FLUX's q / k of the joint and single blocks). One and two segments, with and without weights, f32 / bf16 /
// f16, a head dim off the vector widths, strided segment views; a trace that records pieces records those ops;
// bad inputs are errors naming the op. (Mutating the norm's rounding, the segment lookup or the rope position
// fails here.)
#include <gtest/gtest.h>

#include <string>

#include "common/error_of.h"
#include "common/random_tensor.h"
#include "diffq/error.h"
#include "expect_bits.h"
#include "ops/ops.h"
#include "ops/trace.h"

namespace diffq {
namespace {

using testing::randn;

Tensor chain(const std::vector<Tensor>& xs, const std::vector<Tensor>& ws, double eps, const Tensor& cs,
             const Tensor& sn) {
  std::vector<Tensor> normed;
  for (size_t i = 0; i < xs.size(); ++i) normed.push_back(ops::rms_norm(xs[i], ws[i], eps));
  return ops::rope(normed.size() == 1 ? normed[0] : ops::concat(normed, 1), cs, sn);
}

// Tables like FLUX's: each angle's cos / sin repeated for its pair.
std::pair<Tensor, Tensor> tables(int64_t S, int64_t D) {
  std::vector<float> c(size_t(S * D)), s(size_t(S * D));
  for (int64_t p = 0; p < S; ++p)
    for (int64_t k = 0; k < D / 2; ++k) {
      const double a = double(p + 1) * std::pow(100.0, -double(k) / double(D));
      c[size_t(p * D + 2 * k)] = c[size_t(p * D + 2 * k + 1)] = float(std::cos(a));
      s[size_t(p * D + 2 * k)] = s[size_t(p * D + 2 * k + 1)] = float(std::sin(a));
    }
  return {Tensor::from_vector(c, {S, D}), Tensor::from_vector(s, {S, D})};
}

TEST(RmsNormRope, EqualsTheNormsConcatAndRopeBitwise) {
  for (const DType dt : {DType::bf16, DType::f32, DType::f16})
    for (const int64_t D : {int64_t(128), int64_t(10)}) {
      const int64_t B = 2, H = 3, T = 5, N = 7;
      const Tensor txt = randn({B, T, H, D}, 1, dt), img = ops::mul_scalar(randn({B, N, H, D}, 2, dt), 4.0);
      const Tensor w_txt = ops::add_scalar(randn({D}, 3, dt), 1.0), w_img = ops::add_scalar(randn({D}, 4, dt), 1.0);
      const auto [cs, sn] = tables(T + N, D);
      const std::string tag = std::string(dtype_name(dt)) + ", D " + std::to_string(D);
      expect_bits_equal(ops::rms_norm_rope({txt, img}, {w_txt, w_img}, 1e-6, cs, sn),
                        chain({txt, img}, {w_txt, w_img}, 1e-6, cs, sn), "two segments, " + tag);
      expect_bits_equal(ops::rms_norm_rope({txt, img}, {Tensor(), w_img}, 1e-6, cs, sn),
                        chain({txt, img}, {Tensor(), w_img}, 1e-6, cs, sn), "one weight, " + tag);
      const auto [cs1, sn1] = tables(N, D);
      expect_bits_equal(ops::rms_norm_rope({img}, {w_img}, 1e-5, cs1, sn1), chain({img}, {w_img}, 1e-5, cs1, sn1),
                        "one segment, " + tag);
      // Segments as views: the heads of a wider row (a slice of the last two dims) and a transposed layout.
      const Tensor wide = randn({B, N, H + 1, D + 2}, 5, dt).slice(2, 1, H + 1).slice(3, 2, D + 2);
      const Tensor trans = randn({B, H, T, D}, 6, dt).transpose(1, 2);
      expect_bits_equal(ops::rms_norm_rope({trans, wide}, {w_txt, w_img}, 1e-6, cs, sn),
                        chain({trans, wide}, {w_txt, w_img}, 1e-6, cs, sn), "strided views, " + tag);
    }
}

TEST(RmsNormRope, ATraceOfPiecesRecordsTheOpsItStandsFor) {
  const auto [cs, sn] = tables(12, 8);
  ops::Trace trace(/*record_pieces=*/true);
  const Tensor a = trace.input({1, 5, 2, 8}, DType::bf16), b = trace.input({1, 7, 2, 8}, DType::bf16);
  const Tensor y = ops::rms_norm_rope({a, b}, {Tensor(), Tensor()}, 1e-6, cs, sn);
  const ops::Graph g = trace.finish({y});
  std::vector<std::string> kinds;
  for (const auto& n : g.nodes) kinds.emplace_back(ops::op_name(n.call.kind));
  EXPECT_EQ(kinds, (std::vector<std::string>{"rms_norm", "rms_norm", "concat", "rope"}));
}

TEST(RmsNormRope, BadInputsAreErrorsNamingTheOp) {
  const auto cos_sin = tables(12, 8);  // (no structured binding: the lambdas below capture the tables)
  const Tensor cs = cos_sin.first, sn = cos_sin.second;
  const Tensor a = randn({1, 5, 2, 8}, 1, DType::bf16), b = randn({1, 7, 2, 8}, 2, DType::bf16);
  const auto throws_naming_op = [](const std::function<void()>& f) {
    EXPECT_NE(testing::error_of(f).find("rms_norm_rope"), std::string::npos) << testing::error_of(f);
  };
  throws_naming_op([&] { ops::rms_norm_rope({a, b}, {Tensor()}, 1e-6, cs, sn); });  // a weight per segment
  throws_naming_op([&] { ops::rms_norm_rope({a}, {Tensor()}, 1e-6, cs, sn); });      // tables of 12 rows for 5
  throws_naming_op([&] { ops::rms_norm_rope({a, b.to(DType::f32)}, {Tensor(), Tensor()}, 1e-6, cs, sn); });
  throws_naming_op([&] { ops::rms_norm_rope({a, randn({1, 7, 3, 8}, 3, DType::bf16)}, {Tensor(), Tensor()}, 1e-6, cs, sn); });
  throws_naming_op([&] { ops::rms_norm_rope({a, b}, {randn({4}, 4, DType::bf16), Tensor()}, 1e-6, cs, sn); });
}

}  // namespace
}  // namespace diffq
