// The quantized linear as an op (ops/linear_q.h): QuantizedWeight::linear dispatches linear_q with the
// activation, the bias and the weight's packed tensors as inputs; the CPU's kernels (backend/cpu/quant) are
// registered per scheme and for "*" (the weight's tile linear plan); a kernel registered for one scheme on a
// device takes that scheme only; the op's f64 reference is the scheme's dequantization; the profile counts
// its FLOPs; which weights the CPU delivers in parts (compile's GEMM prologue). (A device without a kernel
// for a scheme refusing it at load: tests/pipelines/test_pipeline_placement.cpp.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "backend/cpu/quant/dequant_rows.h"
#include "backend/cpu/quant/linear_q_parts.h"
#include "backend/cpu/quant/tile_linear.h"
#include "backend/reference/reference_ops.h"
#include "diffq/error.h"
#include "ops/linear_q.h"
#include "ops/op_profile.h"
#include "ops/ops.h"
#include "quant/bnb/bnb_int8.h"
#include "quant/torchao/torchao.h"

namespace {

using namespace diffq;
namespace tao = diffq::quant::torchao;

Tensor random_f32(const Shape& s, uint32_t seed) {
  Tensor t = Tensor::empty(s, DType::f32);
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = n(rng);
  return t;
}

std::shared_ptr<QuantizedWeight> quantized(const char* type, const Tensor& w) {
  return tao::quantize(w, tao::Config::from_json({{"_type", type}, {"_version", 2}, {"_data", nlohmann::json::object()}}));
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  const Tensor x = a.contiguous(), y = b.contiguous();
  return x.dtype() == y.dtype() && x.shape() == y.shape() && std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) == 0;
}

// The CPU's tile linear driver run directly on the weight's plan (what the CPU's "*" kernel computes for a
// torchao weight-only scheme, whose plan keeps x's dtype).
Tensor tile_linear(const QuantizedWeight& q, const Tensor& x, const Tensor& bias) {
  return backend::cpu::run_tile_linear(*backend::cpu::cpu_tile_linear_plan(q, x, bias));
}

TEST(LinearQOp, AQuantizedLinearIsTheOpWithTheSchemesHostResult) {
  const auto q = quantized("Int8WeightOnlyConfig", random_f32({48, 64}, 1));
  const Tensor x = random_f32({5, 64}, 2), bias = random_f32({48}, 3);
  const Tensor y = q->linear(x, bias);
  EXPECT_EQ(y.shape(), (Shape{5, 48}));
  EXPECT_TRUE(same_bytes(y, tile_linear(*q, x, bias)));
  EXPECT_TRUE(same_bytes(ops::linear_q(x.to(DType::bf16), *q), tile_linear(*q, x.to(DType::bf16), Tensor())));
  // What the call carries: x, the bias, then the packed tensors (so the dispatcher sees where they live).
  const std::string e = [&] {
    try {
      ops::linear_q(random_f32({5, 63}, 4), *q);
    } catch (const Error& err) {
      return std::string(err.what());
    }
    return std::string();
  }();
  EXPECT_NE(e.find("[linear_q] x Tensor[5, 63]"), std::string::npos) << e;
  EXPECT_NE(e.find("torchao_int8wo"), std::string::npos) << e;
}

int g_spy_calls = 0;
void spy_kernel(const ops::OpCall& c, Tensor& out) {
  ++g_spy_calls;
  static const ops::KernelFn generic = ops::find_linear_q_kernel(DeviceKind::cpu, "*");
  generic(c, out);
}

TEST(LinearQOp, ASchemesOwnKernelOnADeviceTakesThatSchemeOnly) {
  const auto q8 = quantized("Int8WeightOnlyConfig", random_f32({32, 64}, 5));
  const auto f8 = quantized("Float8WeightOnlyConfig", random_f32({32, 64}, 6));
  const Tensor x = random_f32({3, 64}, 7);
  ASSERT_NE(q8->scheme(), f8->scheme());
  EXPECT_NE(ops::find_linear_q_kernel(DeviceKind::cpu, "any_scheme"), nullptr);  // the CPU's "*"
  EXPECT_EQ(ops::find_linear_q_kernel(DeviceKind::cuda, "any_scheme"), nullptr)
      << "no device but the CPU has a generic quantized kernel";
  g_spy_calls = 0;
  ops::register_linear_q_kernel(DeviceKind::cpu, q8->scheme(), spy_kernel);
  const Tensor a = q8->linear(x, Tensor());
  const Tensor b = f8->linear(x, Tensor());
  ops::register_linear_q_kernel(DeviceKind::cpu, q8->scheme(), nullptr);
  EXPECT_EQ(g_spy_calls, 1);
  q8->linear(x, Tensor());
  EXPECT_EQ(g_spy_calls, 1) << "unregistered: the generic kernel again";
  EXPECT_TRUE(same_bytes(a, tile_linear(*q8, x, Tensor())));
  EXPECT_TRUE(same_bytes(b, tile_linear(*f8, x, Tensor())));
}

TEST(LinearQOp, ReferenceIsTheSchemesDequantizationAndTheProfileCountsItsFlops) {
  const auto q = quantized("Int8WeightOnlyConfig", random_f32({40, 96}, 8));
  const Tensor x = random_f32({2, 3, 96}, 9), bias = random_f32({40}, 10);
  ops::OpCall c{ops::OpKind::linear_q, {x, bias}, {}};
  for (const Tensor& t : q->storage_tensors()) c.inputs.push_back(t);
  c.attrs.packed = q.get();
  EXPECT_EQ(ops::infer(c).shape, (Shape{2, 3, 40}));
  EXPECT_DOUBLE_EQ(ops::op_profile_flops(c), 2.0 * 6 * 40 * 96);
  const reference::Array want = reference::run(c);
  const std::vector<float> got = q->linear(x, bias).to_f32_vector();
  ASSERT_EQ(got.size(), want.v.size());
  double err = 0, scale = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    err = std::max(err, std::fabs(double(got[i]) - want.v[i]));
    scale = std::max(scale, std::fabs(want.v[i]));
  }
  EXPECT_LT(err / scale, 1e-5) << "int8wo in f32: the host kernel against dequantize + the f64 linear";
  EXPECT_GT(scale, 1.0);
}

// The CPU registers its own kernels for the schemes that do not dequantize (int8dq's int8 GEMM, LLM.int8,
// Nunchaku's W4A4), "*" for the rest; it delivers parts (compile's GEMM prologue) for a weight with a tile
// plan or int8dq, not for LLM.int8, and the parts hold linear_q's values.
TEST(LinearQOp, TheCpuHasKernelsPerSchemeAndSaysWhichDeliverParts) {
  const ops::KernelFn generic = ops::find_linear_q_kernel(DeviceKind::cpu, "*");
  for (const char* s : {"torchao_int8dq", "bnb_int8", "nunchaku_svdq_w4a4_int4"})
    EXPECT_NE(ops::find_linear_q_kernel(DeviceKind::cpu, s), generic) << s;
  EXPECT_EQ(ops::find_linear_q_kernel(DeviceKind::cpu, "torchao_int8wo"), generic);
  const Tensor w = random_f32({16, 64}, 11);
  const auto wo = quantized("Int8WeightOnlyConfig", w);
  const auto dq = quantized("Int8DynamicActivationInt8WeightConfig", w);
  const auto llm = quant::Bnb8bitWeight::quantize(w);
  ASSERT_EQ(dq->scheme(), "torchao_int8dq");
  EXPECT_TRUE(backend::cpu::linear_q_has_parts(*wo));
  EXPECT_TRUE(backend::cpu::linear_q_has_parts(*dq));
  EXPECT_FALSE(backend::cpu::linear_q_has_parts(*llm)) << "LLM.int8 has no parts";
  llm->set_mode(quant::Int8LinearMode::dequantize_fp);
  EXPECT_TRUE(backend::cpu::linear_q_has_parts(*llm)) << "the dequantize mode has a tile plan";
  // The parts, gathered, are linear_q's values (f32 here: no rounding).
  const Tensor x = random_f32({3, 64}, 12), bias = random_f32({16}, 13);
  for (const QuantizedWeight* q : {wo.get(), dq.get()}) {
    Tensor y = Tensor::empty({3, 16}, DType::f32);
    float* yp = y.data<float>();
    backend::cpu::GemmParts parts;
    parts.begin = [&](int64_t r0, int64_t, int64_t c0, int64_t, int64_t* ld) {
      *ld = 16;
      return yp + r0 * 16 + c0;
    };
    parts.end = [](int64_t, int64_t, int64_t, int64_t, const float*, int64_t) {};
    backend::cpu::linear_q_parts(*q, x, bias, parts);
    EXPECT_TRUE(same_bytes(y, q->linear(x, bias))) << q->scheme();
  }
  llm->set_mode(quant::Int8LinearMode::llm_int8);
  EXPECT_THROW(backend::cpu::linear_q_parts(*llm, x, bias, backend::cpu::GemmParts{}), Error);
}

}  // namespace
