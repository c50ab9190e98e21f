// bitsandbytes LLM.int8 (Linear8bitLt) against bitsandbytes 0.50.2 on the CPU: Int8Params quantization
// and int8_vectorwise_dequant bit for bit, the eval-mode forward with threshold outlier decomposition,
// the file layout, the dequantized linear mode, and the errors.
#include <gtest/gtest.h>

#include "core/random.h"
#include "diffq/error.h"
#include "ops/ops.h"
#include "quant/bnb/bnb_int8.h"
#include "test_bnb_common.h"

namespace {

using diffq::DType;
using diffq::Tensor;
using diffq::quant::Bnb8bitWeight;
using diffq::quant::Int8LinearMode;
using bnbtest::same_bytes;

const diffq::io::StateDict& fx() {
  static const auto t =
      diffq::io::SafetensorsFile::open(bnbtest::fixtures() / "quant" / "bnb" / "cases.safetensors").tensors();
  return t;
}
const nlohmann::json& cases() {
  static const auto j = bnbtest::read_json(bnbtest::fixtures() / "quant" / "bnb" / "cases.json")["cases"];
  return j;
}
const Tensor& T(const std::string& k) { return fx().at(k); }

TEST(BnbInt8, QuantizeAndDequantizeAreBitExact) {
  int n = 0;
  for (const auto& [name, c] : cases().items()) {
    if (c["kind"] != "int8") continue;
    SCOPED_TRACE(name);
    const DType dt = diffq::parse_dtype(c["dtype"].get<std::string>());
    const auto q = Bnb8bitWeight::quantize(T(name + ".w").to(dt));
    EXPECT_TRUE(same_bytes(q->cb(), T(name + ".cb")));
    EXPECT_TRUE(same_bytes(q->scb(), T(name + ".scb")));
    const Bnb8bitWeight ref(T(name + ".cb"), T(name + ".scb"));
    EXPECT_TRUE(same_bytes(ref.dequantize(DType::f32), T(name + ".deq")));
    ++n;
  }
  EXPECT_EQ(n, 3);
}

TEST(BnbInt8, LinearMatchesLinear8bitLtForward) {
  int n = 0;
  for (const auto& [name, c] : cases().items()) {
    if (c["kind"] != "forward8") continue;
    SCOPED_TRACE(name);
    const DType wdt = diffq::parse_dtype(c["dtype"].get<std::string>());
    const auto q = Bnb8bitWeight::quantize(T(name + ".w").to(wdt), c["threshold"].get<double>());
    EXPECT_TRUE(same_bytes(q->cb(), T(name + ".cb")));
    EXPECT_TRUE(same_bytes(q->scb(), T(name + ".scb")));
    const Tensor& x = T(name + ".x");
    const Tensor y = q->linear(x, T(name + ".bias"));
    const Tensor& ref = T(name + ".y");
    EXPECT_EQ(y.dtype(), ref.dtype());
    EXPECT_EQ(y.shape(), ref.shape());
    // Same int8 codes and scales, so only float32 accumulation order (and one 16-bit rounding) differs.
    const double tol = ref.dtype() == DType::f32 ? 1e-6 : ref.dtype() == DType::bf16 ? 8e-3 : 1e-3;
    EXPECT_LE(bnbtest::max_rel(y, ref), tol);
    ++n;
  }
  EXPECT_EQ(n, 7);
}

TEST(BnbInt8, OutlierColumnsAreComputedFromTheInputNotItsCodes) {
  // With threshold 6 the outlier column's contribution comes from x itself: scaling the outlier changes
  // y linearly; without the decomposition (threshold 0) it would be clipped by the row absmax.
  diffq::Generator g(5);
  const Tensor w = diffq::randn_tensor({8, 16}, g, DType::f32);
  const auto q = Bnb8bitWeight::quantize(w, 6.0);
  std::vector<float> xv(32, 0.5f);
  xv[3] = 50.0f;
  const Tensor x = Tensor::from_vector(xv, {2, 16});
  const Tensor y = q->linear(x, {});
  const Tensor ref = diffq::ops::linear(x, q->dequantize(DType::f32));
  EXPECT_LE(bnbtest::max_rel(y, ref), 2e-2);
}

TEST(BnbInt8, DequantizeFpModeEqualsDequantizePlusDenseLinear) {
  diffq::Generator g(3);
  for (auto [M, N, K] : {std::tuple{1, 5, 9}, {7, 40, 64}, {33, 130, 300}}) {
    const auto q = Bnb8bitWeight::quantize(diffq::randn_tensor({N, K}, g, DType::f32));
    q->set_mode(Int8LinearMode::dequantize_fp);
    const Tensor b = diffq::randn_tensor({N}, g, DType::f32);
    for (DType dt : {DType::f32, DType::bf16}) {
      const Tensor x = diffq::randn_tensor({M, K}, g, DType::f32).to(dt);
      const Tensor y = q->linear(x, b);
      // MatMul8bitFp's weight: (q cast to x's dtype) * (SCB * 1/127), rounded to x's dtype.
      const Tensor wq = diffq::ops::mul(q->cb().to(DType::f32),
                                        diffq::ops::mul_scalar(q->scb(), double(float(1.0 / 127.0))).reshape({N, 1}));
      const Tensor ref = diffq::ops::linear(x.to(DType::f32), wq.to(dt).to(DType::f32), b.to(dt).to(DType::f32));
      EXPECT_EQ(y.dtype(), dt);
      EXPECT_LE(bnbtest::max_rel(y, ref), dt == DType::f32 ? 1e-5 : 8e-3);
      // And within rounding of the int8_vectorwise_dequant weights.
      const Tensor ref2 = diffq::ops::linear(x.to(DType::f32), q->dequantize(DType::f32), b);
      EXPECT_LE(bnbtest::max_rel(y, ref2), dt == DType::f32 ? 1e-5 : 2e-2);
    }
  }
}

TEST(BnbInt8, FileLayoutAndErrors) {
  diffq::Generator g(9);
  const auto q = Bnb8bitWeight::quantize(diffq::randn_tensor({6, 10}, g, DType::f32));
  diffq::io::NamedTensors nt;
  q->save(nt, "blocks.0.ff");
  ASSERT_EQ(nt.size(), 3u);
  EXPECT_EQ(nt[0].first, "blocks.0.ff.weight");
  EXPECT_EQ(nt[0].second.dtype(), DType::i8);
  EXPECT_EQ(nt[1].first, "blocks.0.ff.SCB");
  EXPECT_EQ(nt[1].second.shape(), (diffq::Shape{6}));
  EXPECT_EQ(nt[2].first, "blocks.0.ff.weight_format");
  EXPECT_EQ(nt[2].second.dtype(), DType::u8);
  EXPECT_EQ(nt[2].second.dim(), 0);
  diffq::io::StateDict sd(nt.begin(), nt.end());
  EXPECT_TRUE(same_bytes(Bnb8bitWeight::load(sd, "blocks.0.ff")->dequantize(DType::f32), q->dequantize(DType::f32)));

  auto expect_error = [](const diffq::io::StateDict& s, const std::string& needle) {
    try {
      Bnb8bitWeight::load(s, "blocks.0.ff");
      ADD_FAILURE() << "no error, expected " << needle;
    } catch (const diffq::Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  {
    auto s = sd;
    s.erase("blocks.0.ff.SCB");
    expect_error(s, "Missing quantization component `SCB`");
  }
  {
    auto s = sd;
    s["blocks.0.ff.weight_format"] = Tensor::full({}, 1, DType::u8);
    expect_error(s, "Only 'row' weight format is supported, got col32");
  }
  {
    auto s = sd;
    s["blocks.0.ff.weight_format"] = Tensor::full({}, 9, DType::u8);
    expect_error(s, "Expected supported weight format - got 9");
  }
  {
    auto s = sd;
    s["blocks.0.ff.SCB"] = Tensor::zeros({5}, DType::f32);
    expect_error(s, "SCB must be float32 [6]");
  }
  {
    auto s = sd;
    s["blocks.0.ff.weight"] = Tensor::zeros({6, 10}, DType::u8);
    expect_error(s, "blocks.0.ff.weight must be int8");
  }
  EXPECT_THROW(q->linear(Tensor::zeros({1, 11}, DType::f32), {}), diffq::Error);
}

}  // namespace
