// linear_q on CUDA (src/backend/cuda/quant): a quantized weight moved to the GPU computes its linear there
// with its scheme's CUDA kernel, equal to the CPU's kernel on the same packed weight within the op table's
// tolerance for the dtype; schemes without a CUDA kernel have none registered (placement refuses them at
// load, tests/pipelines/test_pipeline_placement.cpp).
#include <cmath>

#include "gpu_test.h"
#include "modules/parameter.h"
#include "ops/linear_q.h"
#include "quant/bfl/fp8_scaled_weight.h"
#include "quant/bfl/nvfp4_weight.h"
#include "quant/bnb/bnb_4bit.h"
#include "quant/gguf/gguf_weight.h"
#include "quant/autoround/autoround_weight.h"
#include "quant/modelopt/int4_awq_weight.h"
#include "quant/modelopt/int8_channel_weight.h"
#include "quant/quanto/quanto.h"
#include "quant/sdnq/sdnq_dtypes.h"
#include "quant/sdnq/sdnq_weight.h"
#include "quant/torchao/int4_weight.h"
#include "quant/torchao/torchao.h"
#include "torchao_test_config.h"

using namespace diffq;
using namespace diffq::cudatest;
namespace tao = diffq::quant::torchao;

namespace {

std::shared_ptr<QuantizedWeight> int8wo(const Tensor& w, const char* granularity) {
  return tao::quantize(w, torchao_config("Int8WeightOnlyConfig", granularity, /*pair=*/false));
}

double rel_err(const Tensor& got, const Tensor& want) {
  const std::vector<float> a = got.to_f32_vector(), b = want.to_f32_vector();
  double err = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    err = std::max(err, std::fabs(double(a[i]) - double(b[i])));
    scale = std::max(scale, std::fabs(double(b[i])));
  }
  return scale > 0 ? err / scale : err;
}

}  // namespace

TEST(LinearQOnCuda, KernelsRegisteredPerScheme) {  // needs no GPU
  for (const char* s : {"torchao_int8wo", "torchao_float8wo", "bnb_nf4", "bnb_fp4", "gguf_q4_0", "gguf_q4_k",
                        "gguf_q5_k", "gguf_q6_k", "gguf_q8_0", "gguf_iq4_xs", "gguf_bf16", "torchao_int4wo",
                        "quanto_int8", "quanto_float8", "quanto_int4", "quanto_int2", "sdnq_int8", "sdnq_uint4",
                        "sdnq_float8_e4m3fn", "autoround_int4", "autoround_int2", "bfl_fp8r", "bfl_nvfp4",
                        "modelopt_fp8", "modelopt_fp8_pc", "modelopt_int8", "modelopt_int4_awq", "modelopt_nvfp4"})
    EXPECT_NE(ops::find_linear_q_kernel(DeviceKind::cuda, s), nullptr) << s;
  for (const char* s : {"torchao_int8dq", "torchao_float8dq", "torchao_int2wo", "torchao_int7wo"})
    EXPECT_NE(ops::find_linear_q_kernel(DeviceKind::cuda, s), nullptr) << s;
  for (const char* s : {"bnb_int8", "nunchaku_svdq_w4a4_int4", "nunchaku_awq_w4a16_int4"})
    EXPECT_EQ(ops::find_linear_q_kernel(DeviceKind::cuda, s), nullptr) << s << ": no CUDA kernel yet (issue 37)";
}

// The weight moved to the GPU as a parameter is (its packed storage uploaded), the linear computed there.
Tensor linear_on_gpu(const std::shared_ptr<QuantizedWeight>& w, const Tensor& x, const Tensor& b) {
  Parameter p(w->shape());
  p.set(w, Residency::host);
  p.move_to(gpu());
  for (const Tensor& t : w->storage_tensors()) EXPECT_EQ(t.device(), gpu());
  const Tensor y = p.quantized().linear(x.to(gpu()), b.defined() ? b.to(gpu()) : Tensor());
  EXPECT_EQ(y.device(), gpu());
  EXPECT_EQ(y.dtype(), x.dtype());
  return y.to(Device::cpu());
}

double tolerance(DType dt) { return dt == DType::f32 ? 1e-5 : dt == DType::bf16 ? 1e-2 : 2e-3; }

TEST(LinearQOnCuda, GgufMatchesTheCpu) {
  DIFFQ_REQUIRE_GPU();
  for (const char* type : {"q4_0", "q4_1", "q5_0", "q8_0", "q2_K", "q3_K", "q4_K", "q5_K", "q6_K", "iq4_xs"})
    for (DType cd : {DType::f32, DType::bf16})
      for (DType dt : {DType::f32, DType::bf16}) {
        SCOPED_TRACE(std::string(type) + " compute " + std::string(dtype_name(cd)) + " x " + std::string(dtype_name(dt)));
        quant::GGUFQuantizationConfig cfg = quant::GGUFQuantizationConfig::from_json({{"type", type}});
        cfg.compute_dtype = cd;
        const Tensor w = random_values({64, 512}, DType::f32, 11), x = random_values({5, 512}, dt, 12),
                     b = random_values({64}, dt, 13);
        const auto on_cpu = quant::GGUFQuantizedWeight::quantize(w, cfg), on_gpu = quant::GGUFQuantizedWeight::quantize(w, cfg);
        EXPECT_LE(rel_err(linear_on_gpu(on_gpu, x, b), on_cpu->linear(x, b)), tolerance(dt));
      }
}

TEST(LinearQOnCuda, Bnb4bitMatchesTheCpu) {
  DIFFQ_REQUIRE_GPU();
  for (auto type : {quant::bnb::QuantType::nf4, quant::bnb::QuantType::fp4})
    for (bool nested : {false, true})
      for (DType cd : {DType::f32, DType::bf16, DType::f16})
        for (DType dt : {DType::f32, DType::bf16}) {
          SCOPED_TRACE(std::string(quant::bnb::quant_type_name(type)) + (nested ? " nested" : "") + " compute " +
                       std::string(dtype_name(cd)) + " x " + std::string(dtype_name(dt)));
          quant::Bnb4bitOptions o;
          o.quant_type = type;
          o.double_quant = nested;
          o.compute_dtype = cd;
          const Tensor w = random_values({72, 320}, DType::f32, 21), x = random_values({6, 320}, dt, 22),
                       b = random_values({72}, dt, 23);
          const auto on_cpu = quant::Bnb4bitWeight::quantize(w, o), on_gpu = quant::Bnb4bitWeight::quantize(w, o);
          EXPECT_LE(rel_err(linear_on_gpu(on_gpu, x, b), on_cpu->linear(x, b)),
                    std::max(tolerance(dt), tolerance(cd)));
        }
}

TEST(LinearQOnCuda, TorchaoInt8WeightOnlyMatchesTheCpu) {
  DIFFQ_REQUIRE_GPU();
  for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
    for (const char* g : {"PerRow", "PerTensor"}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " " + g);
      const Tensor w = random_values({96, 256}, dt, 1), x = random_values({7, 256}, dt, 2),
                   b = random_values({96}, dt, 3);
      const auto on_cpu = int8wo(w, g), on_gpu = int8wo(w, g);
      Parameter p({96, 256});
      p.set(on_gpu, Residency::host);
      p.move_to(gpu());
      ASSERT_EQ(on_gpu->storage_tensors()[0].device(), gpu());
      const Tensor y = p.quantized().linear(x.to(gpu()), b.to(gpu()));
      ASSERT_EQ(y.device(), gpu());
      ASSERT_EQ(y.dtype(), dt);
      const Tensor want = on_cpu->linear(x, b);
      EXPECT_LE(rel_err(y.to(Device::cpu()), want), dt == DType::f32 ? 1e-5 : dt == DType::bf16 ? 1e-2 : 2e-3);
    }
  }
}

TEST(LinearQOnCuda, TorchaoFloat8WeightOnlyMatchesTheCpu) {
  DIFFQ_REQUIRE_GPU();
  for (DType dt : {DType::f32, DType::bf16}) {
    for (const char* g : {"PerRow", "PerTensor"}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " " + g);
      const Tensor w = random_values({80, 192}, dt, 4), x = random_values({9, 192}, dt, 5);
      const auto cfg = torchao_config("Float8WeightOnlyConfig", g, /*pair=*/false);
      const auto on_cpu = tao::quantize(w, cfg), on_gpu = tao::quantize(w, cfg);
      ASSERT_EQ(on_gpu->scheme(), "torchao_float8wo");
      Parameter p({80, 192});
      p.set(on_gpu, Residency::host);
      p.move_to(gpu());
      const Tensor y = p.quantized().linear(x.to(gpu()), Tensor());
      ASSERT_EQ(y.dtype(), dt);
      EXPECT_LE(rel_err(y.to(Device::cpu()), on_cpu->linear(x, Tensor())), dt == DType::f32 ? 1e-5 : 1e-2);
    }
  }
}

TEST(LinearQOnCuda, TorchaoInt4WeightOnlyMatchesTheCpu) {
  DIFFQ_REQUIRE_GPU();
  for (DType dt : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dt));
    const Tensor w = random_values({64, 256}, dt, 31), x = random_values({5, 256}, dt, 32), b = random_values({64}, dt, 33);
    const auto on_cpu = tao::Int4Weight::quantize(w, 64), on_gpu = tao::Int4Weight::quantize(w, 64);
    EXPECT_LE(rel_err(linear_on_gpu(on_gpu, x, b), on_cpu->linear(x, b)), tolerance(dt));
  }
}

TEST(LinearQOnCuda, QuantoMatchesTheCpu) {
  DIFFQ_REQUIRE_GPU();
  for (auto qt : {quant::QuantoQType::int8, quant::QuantoQType::float8, quant::QuantoQType::int4, quant::QuantoQType::int2})
    for (DType dt : {DType::f32, DType::bf16}) {
      SCOPED_TRACE(std::string(quant::quanto_qtype_name(qt)) + " " + std::string(dtype_name(dt)));
      const Tensor w = random_values({96, 256}, dt, 41), x = random_values({3, 256}, dt, 42), b = random_values({96}, dt, 43);
      const auto on_cpu = quant::QuantoWeight::quantize(w, qt), on_gpu = quant::QuantoWeight::quantize(w, qt);
      EXPECT_LE(rel_err(linear_on_gpu(on_gpu, x, b), on_cpu->linear(x, b)), tolerance(dt));
    }
}

TEST(LinearQOnCuda, SdnqMatchesTheCpu) {
  DIFFQ_REQUIRE_GPU();
  for (const std::string& name : quant::sdnq::sdnq_supported_dtypes())
    for (DType dt : {DType::f32, DType::bf16}) {
      SCOPED_TRACE(name + " " + std::string(dtype_name(dt)));
      const Tensor w = random_values({64, 256}, dt, 51), x = random_values({4, 256}, dt, 52), b = random_values({64}, dt, 53);
      const auto& d = quant::sdnq::sdnq_dtype(name);
      const auto on_cpu = quant::sdnq::SdnqWeight::quantize(w, d, 0, DType::f32),
                 on_gpu = quant::sdnq::SdnqWeight::quantize(w, d, 0, DType::f32);
      EXPECT_LE(rel_err(linear_on_gpu(on_gpu, x, b), on_cpu->linear(x, b)), tolerance(dt));
    }
}

TEST(LinearQOnCuda, AutoRoundMatchesTheCpu) {
  DIFFQ_REQUIRE_GPU();
  const int64_t N = 64, K = 256, G = 2;
  std::mt19937 rng(61);
  std::vector<float> sc(size_t(G * N));
  for (float& s : sc) s = 0.01f + 0.001f * float(rng() % 32);
  auto words = [&](int64_t n, const Shape& shape) {
    Tensor t = Tensor::empty(shape, DType::i32);
    for (int64_t i = 0; i < n; ++i) static_cast<int32_t*>(t.data_ptr())[i] = int32_t(rng());
    return t;
  };
  for (DType dt : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dt));
    quant::autoround::AutoRoundLayout l;
    l.bits = 4;
    l.group_size = K / G;
    const Tensor qweight = words(K / 8 * N, {K / 8, N}), qzeros = words(G * N / 8, {G, N / 8}),
                 scales = Tensor::from_vector(sc, {G, N}, DType::f16);
    auto make = [&] { return std::make_shared<quant::autoround::AutoRoundWeight>(l, qweight.clone(), qzeros.clone(), scales.clone(), Tensor(), Shape{N, K}); };
    const Tensor x = random_values({4, K}, dt, 62), b = random_values({N}, dt, 63);
    EXPECT_LE(rel_err(linear_on_gpu(make(), x, b), make()->linear(x, b)), tolerance(dt));
  }
}

TEST(LinearQOnCuda, ScaledLayoutsMatchTheCpu) {
  DIFFQ_REQUIRE_GPU();
  const int64_t N = 64, K = 256;
  std::mt19937 rng(71);
  auto codes = [&](const Shape& shape, DType dt, uint8_t mask) {  // finite codes (no float8 NaN)
    Tensor t = Tensor::empty(shape, dt);
    auto* p = static_cast<uint8_t*>(t.data_ptr());
    for (size_t i = 0; i < t.nbytes(); ++i) p[i] = uint8_t(rng()) & mask;
    return t;
  };
  for (DType dt : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dt));
    // Each weight made twice from the same tensors (one stays on the CPU).
    std::vector<std::function<std::shared_ptr<quant::ScaledWeight>()>> makers;
    const Tensor fq = codes({N, K}, DType::f8_e4m3fn, 0x77), fs = random_values({N}, DType::f32, 72, 0.01f, 0.1f);
    makers.push_back([=] { return std::make_shared<quant::Fp8ScaledWeight>(fq.clone(), fs.clone(), "bfl_fp8r", "w"); });
    const Tensor np = codes({N, K / 2}, DType::u8, 0xff), nb = codes({N, K / 16}, DType::f8_e4m3fn, 0x3f),
                 n2 = random_values({1}, DType::f32, 73);
    makers.push_back([=] { return std::make_shared<quant::Nvfp4Weight>(np.clone(), nb.clone(), n2.clone(), "modelopt_nvfp4", "w"); });
    const Tensor ap = codes({N / 2, K}, DType::u8, 0xff), as = random_values({N, K / 64}, DType::bf16, 74, 0.01f, 0.1f),
                 pq = random_values({K}, DType::f32, 75, 0.5f, 2.0f);
    makers.push_back([=] {
      auto w = std::make_shared<quant::Int4AwqWeight>(ap.clone(), as.clone(), "modelopt_int4_awq", "w");
      w->set_pre_quant_scale(pq.clone(), "pre_quant_scale");
      return w;
    });
    const Tensor iq = codes({N, K}, DType::i8, 0xff), is = random_values({N}, DType::f32, 76, 0.001f, 0.01f);
    makers.push_back([=] { return std::make_shared<quant::Int8ChannelWeight>(iq.clone(), is.clone(), "modelopt_int8", "w"); });
    const Tensor x = random_values({5, K}, dt, 77), b = random_values({N}, dt, 78);
    for (const auto& make : makers) {
      const auto on_cpu = make();
      SCOPED_TRACE(on_cpu->scheme());
      EXPECT_LE(rel_err(linear_on_gpu(make(), x, b), on_cpu->linear(x, b)), tolerance(dt));
    }
  }
}

TEST(LinearQOnCuda, TorchaoInt8DynamicMatchesTheCpu) {  // cuBLASLt's IMMA int8 GEMM
  DIFFQ_REQUIRE_GPU();
  for (const char* g : {"PerRow", "PerTensor"})
    for (DType dt : {DType::f32, DType::bf16}) {
      SCOPED_TRACE(std::string(g) + " " + std::string(dtype_name(dt)));
      const auto cfg = torchao_config("Int8DynamicActivationInt8WeightConfig", g, /*pair=*/true);
      const Tensor w = random_values({96, 256}, dt, 81), x = random_values({7, 256}, dt, 82), b = random_values({96}, dt, 83);
      const auto on_cpu = tao::quantize(w, cfg), on_gpu = tao::quantize(w, cfg);
      ASSERT_EQ(on_gpu->scheme(), "torchao_int8dq");
      // Integer products are exact on both sides: the only differences are the final roundings.
      EXPECT_LE(rel_err(linear_on_gpu(on_gpu, x, b), on_cpu->linear(x, b)), dt == DType::f32 ? 1e-6 : 1e-2);
    }
}

TEST(LinearQOnCuda, TorchaoFloat8DynamicMatchesTheCpu) {
  DIFFQ_REQUIRE_GPU();
  for (const char* g : {"PerRow", "PerTensor"})
    for (DType dt : {DType::f32, DType::bf16}) {
      SCOPED_TRACE(std::string(g) + " " + std::string(dtype_name(dt)));
      const auto cfg = torchao_config("Float8DynamicActivationFloat8WeightConfig", g, /*pair=*/true);
      const Tensor w = random_values({80, 192}, dt, 91), x = random_values({6, 192}, dt, 92), b = random_values({80}, dt, 93);
      const auto on_cpu = tao::quantize(w, cfg), on_gpu = tao::quantize(w, cfg);
      ASSERT_EQ(on_gpu->scheme(), "torchao_float8dq");
      EXPECT_LE(rel_err(linear_on_gpu(on_gpu, x, b), on_cpu->linear(x, b)), tolerance(dt));
    }
}
