// The CPU runs a weight's tile linear plan with its own SIMD row dequantizers where it has them
// (backend/cpu/quant/dequant_rows.h: bitsandbytes 4-bit, GGUF, torchao int4): the rows equal the scheme's
// reference rows (the plan's own dequant_rows) bit for bit, with and without a 16-bit compute dtype, and a
// weight without one keeps its plan's rows.
#include <gtest/gtest.h>

#include <vector>

#include "backend/cpu/quant/dequant_rows.h"
#include "core/random.h"
#include "quant/bnb/bnb_4bit.h"
#include "quant/gguf/gguf_weight.h"
#include "quant/torchao/int4_weight.h"
#include "quant/torchao/torchao.h"

namespace {

using namespace diffq;

// Rows [n0, n1) of both plans for x [2, K], bit for bit.
void expect_same_rows(const QuantizedWeight& w, int64_t n0, int64_t n1) {
  const int64_t K = w.shape()[1];
  Generator g(1);
  const Tensor x = randn_tensor({2, K}, g, DType::f32);
  const auto ref = w.tile_linear_plan(x, {});
  const auto cpu = backend::cpu::cpu_tile_linear_plan(w, x, {});
  ASSERT_TRUE(ref.has_value() && cpu.has_value()) << w.scheme();
  std::vector<float> a(size_t((n1 - n0) * K), -1.0f), b(a.size(), -2.0f);
  ref->dequant_rows(n0, n1, a.data());
  cpu->dequant_rows(n0, n1, b.data());
  EXPECT_EQ(a, b) << w.scheme();
}

TEST(CpuDequantRows, Bnb4bitEqualsTheReferenceRows) {
  Generator g(2);
  const Tensor w = randn_tensor({40, 96}, g, DType::f32);
  for (auto qt : {quant::bnb::QuantType::nf4, quant::bnb::QuantType::fp4})
    for (DType compute : {DType::f32, DType::bf16, DType::f16}) {
      quant::Bnb4bitOptions o;
      o.quant_type = qt;
      o.double_quant = qt == quant::bnb::QuantType::nf4;
      o.sum_lanes = 8;
      o.compute_dtype = compute;
      const auto q = quant::Bnb4bitWeight::quantize(w, o);
      expect_same_rows(*q, 0, 40);
      expect_same_rows(*q, 3, 17);  // a range starting inside an absmax block
    }
}

TEST(CpuDequantRows, GgufEqualsTheReferenceRows) {
  Generator g(3);
  const Tensor w = randn_tensor({24, 512}, g, DType::f32);
  using quant::gguf::GGMLType;
  // Types with a SIMD dequantizer and one without (IQ4_XS: the reference itself).
  for (GGMLType t : {GGMLType::Q4_K, GGMLType::Q8_0, GGMLType::Q6_K, GGMLType::IQ4_XS})
    for (DType compute : {DType::f32, DType::bf16, DType::f16}) {
      const auto q = quant::GGUFQuantizedWeight::quantize(w, {t, compute});
      expect_same_rows(*q, 0, 24);
      expect_same_rows(*q, 5, 9);
    }
}

TEST(CpuDequantRows, TorchaoInt4AndOtherSchemesEqualTheReferenceRows) {
  Generator g(4);
  const Tensor w = randn_tensor({32, 256}, g, DType::f32).to(DType::bf16);
  for (int64_t group : {32, 128}) expect_same_rows(*quant::torchao::Int4Weight::quantize(w, group), 2, 31);
  // A scheme without a CPU kernel of its own keeps its plan's rows.
  const nlohmann::json cfg = {{"_type", "Int8WeightOnlyConfig"}, {"_version", 2}, {"_data", nlohmann::json::object()}};
  const auto wo = quant::torchao::quantize(w, quant::torchao::Config::from_json(cfg));
  expect_same_rows(*wo, 0, 32);
}

}  // namespace
