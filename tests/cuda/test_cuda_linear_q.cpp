// linear_q on CUDA (src/backend/cuda/quant): a quantized weight moved to the GPU computes its linear there
// with its scheme's CUDA kernel, equal to the CPU's kernel on the same packed weight within the op table's
// tolerance for the dtype; schemes without a CUDA kernel have none registered (placement refuses them at
// load, tests/pipelines/test_pipeline_placement.cpp).
#include <cmath>
#include <functional>
#include <random>

#include "backend/cuda/kernels.h"
#include "backend/cuda/quant/nunchaku_kernels.h"
#include "backend/cuda/quant/nunchaku_values.cuh"
#include "diffq/error.h"
#include "gpu_test.h"
#include "modules/parameter.h"
#include "ops/linear_q.h"
#include "quant/bfl/fp8_scaled_weight.h"
#include "quant/bfl/nvfp4_weight.h"
#include "quant/bnb/bnb_4bit.h"
#include "quant/bnb/bnb_int8.h"
#include "quant/gguf/gguf_weight.h"
#include "quant/autoround/autoround_weight.h"
#include "quant/modelopt/int4_awq_weight.h"
#include "quant/modelopt/int8_channel_weight.h"
#include "quant/nunchaku/nunchaku.h"
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
    EXPECT_NE(ops::find_linear_q_kernel(DeviceKind::cuda, s), nullptr) << s;
  // CUDA has no catch-all: a scheme without its own kernel finds none (placement refuses it at load).
  EXPECT_EQ(ops::find_linear_q_kernel(DeviceKind::cuda, "no_such_scheme"), nullptr);
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

// bfloat16 activations at a FLUX-like width take cuBLASLt's float8 GEMM on codes (Hopper / Ada): the CPU's
// dequantized GEMM up to rounding and summation order.
TEST(LinearQOnCuda, TorchaoFloat8DynamicRunsOnTheFloat8GemmWhereTheGpuHasOne) {
  DIFFQ_REQUIRE_GPU();
  const auto devs = backend::cuda::list_devices(nullptr);
  const bool fp8_cores = !devs.empty() && (devs[0].cc_major > 8 || (devs[0].cc_major == 8 && devs[0].cc_minor >= 9));
  for (const char* g : {"PerRow", "PerTensor"}) {
    SCOPED_TRACE(g);
    const auto cfg = torchao_config("Float8DynamicActivationFloat8WeightConfig", g, /*pair=*/true);
    const Tensor w = random_values({256, 3072}, DType::bf16, 94), x = random_values({64, 3072}, DType::bf16, 95, 0.01f, 2.0f),
                 b = random_values({256}, DType::bf16, 96);
    const auto on_cpu = tao::quantize(w, cfg), on_gpu = tao::quantize(w, cfg);
    const int64_t before = backend::cuda::gemm_e4m3_runs();
    EXPECT_LE(rel_err(linear_on_gpu(on_gpu, x, b), on_cpu->linear(x, b)), tolerance(DType::bf16));
    if (fp8_cores) EXPECT_EQ(backend::cuda::gemm_e4m3_runs(), before + 1) << "the float8 GEMM did not run";
  }
}

// LLM.int8 (bnb_int8): value for value the CPU's kernel (the int32 products are exact on both sides, every
// other step is the same float operation: bnb_int8_values.cuh), so the results are equal, not close; with
// outlier columns (several rows and one), without the threshold, with K off a multiple of 4 (padded for the
// IMMA GEMM), and in the dequantize_fp mode (a dense GEMM: within the dtype's tolerance).
TEST(LinearQOnCuda, BnbInt8MatchesTheCpu) {
  DIFFQ_REQUIRE_GPU();
  for (int64_t K : {int64_t(320), int64_t(322)})
    for (double threshold : {6.0, 0.0})
      for (int64_t M : {int64_t(6), int64_t(1)})
        for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
          SCOPED_TRACE("K " + std::to_string(K) + " threshold " + std::to_string(threshold) + " M " + std::to_string(M) +
                       " " + std::string(dtype_name(dt)));
          const Tensor wf = random_values({72, K}, DType::f32, 101);
          std::vector<float> xv = random_values({M, K}, DType::f32, 102, 0.1f, 3.0f).to_f32_vector();
          xv[3] = 8.5f, xv[size_t(K - 1)] = -12.0f;  // outlier columns 3 and K-1
          const Tensor x = Tensor::from_vector(xv, {M, K}, dt), b = random_values({72}, dt, 103);
          const auto on_cpu = quant::Bnb8bitWeight::quantize(wf, threshold), on_gpu = quant::Bnb8bitWeight::quantize(wf, threshold);
          EXPECT_EQ(rel_err(linear_on_gpu(on_gpu, x, b), on_cpu->linear(x, b)), 0.0);
          EXPECT_EQ(rel_err(linear_on_gpu(on_gpu, x, Tensor()), on_cpu->linear(x, Tensor())), 0.0) << "no bias";
          on_cpu->set_mode(quant::Int8LinearMode::dequantize_fp);
          on_gpu->set_mode(quant::Int8LinearMode::dequantize_fp);
          EXPECT_LE(rel_err(linear_on_gpu(on_gpu, x, b), on_cpu->linear(x, b)), tolerance(dt)) << "dequantize_fp";
        }
}

namespace {

// random_values with every value positive (float32).
Tensor positive_values(const Shape& shape, uint32_t seed, float lo, float hi) {
  std::vector<float> v = random_values(shape, DType::f32, seed, lo, hi).to_f32_vector();
  for (float& f : v) f = std::fabs(f);
  return Tensor::from_vector(v, shape, DType::f32);
}

std::shared_ptr<quant::nunchaku::SvdqW4A4Weight> random_svdq(int64_t N, int64_t K, int64_t R, bool packed, uint32_t seed) {
  std::mt19937 rng(seed);
  Tensor codes = Tensor::empty({N, K}, DType::i8);
  for (int64_t i = 0; i < N * K; ++i) codes.data<int8_t>()[i] = int8_t(int(rng() % 16) - 8);
  return std::make_shared<quant::nunchaku::SvdqW4A4Weight>(
      codes, random_values({K / 64, N}, DType::f32, seed + 1, 0.002f, 0.02f),
      positive_values({K}, seed + 2, 0.25f, 2.0f), random_values({R, K}, DType::f32, seed + 3, 0.0f, 0.1f),
      random_values({N, R}, DType::f32, seed + 4, 0.0f, 0.1f), packed, "layer");
}

}  // namespace

// SVDQuant W4A4: the activations quantized on the device, exact int32 group sums, the CPU's float order
// everywhere (nunchaku_values.cuh): equal to the CPU's kernel, in the packed layout (permuted bias) and the
// logical one, with a 3-D input, token counts across the 32-row tiles, rank 0 and no bias.
TEST(LinearQOnCuda, NunchakuSvdqMatchesTheCpu) {
  DIFFQ_REQUIRE_GPU();
  struct Case { int64_t N, K, R; bool packed; };
  for (const Case& cs : {Case{128, 256, 16, true}, Case{72, 192, 8, false}, Case{40, 128, 0, false}})
    for (const Shape& xs : {Shape{5}, Shape{37}, Shape{2, 3}})
      for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
        SCOPED_TRACE("N " + std::to_string(cs.N) + " K " + std::to_string(cs.K) + " R " + std::to_string(cs.R) +
                     " x " + shape_str(xs) + " " + std::string(dtype_name(dt)));
        Shape shape = xs;
        shape.push_back(cs.K);
        const Tensor x = random_values(shape, dt, 111, 0.01f, 4.0f), b = random_values({cs.N}, dt, 112);
        const auto on_cpu = random_svdq(cs.N, cs.K, cs.R, cs.packed, 113), on_gpu = random_svdq(cs.N, cs.K, cs.R, cs.packed, 113);
        const Tensor got = linear_on_gpu(on_gpu, x, b);
        EXPECT_EQ(got.shape().back(), cs.N);
        EXPECT_EQ(rel_err(got, on_cpu->linear(x, b)), 0.0);
        EXPECT_EQ(rel_err(linear_on_gpu(on_gpu, x, Tensor()), on_cpu->linear(x, Tensor())), 0.0) << "no bias";
      }
}

// The tiled dp4a GEMM of the W4A4 part against its one-thread-per-output reference and the host's values,
// bit for bit, on sizes off the tile multiples.
TEST(LinearQOnCuda, NunchakuSvdqTiledGemmEqualsItsReference) {
  DIFFQ_REQUIRE_GPU();
  const int64_t M = 70, N = 100, K = 192, G = K / 64;
  std::mt19937 rng(121);
  Tensor q = Tensor::empty({M, K}, DType::i8), c = Tensor::empty({N, K}, DType::i8);
  for (int64_t i = 0; i < M * K; ++i) q.data<int8_t>()[i] = int8_t(int(rng() % 16) - 8);
  for (int64_t i = 0; i < N * K; ++i) c.data<int8_t>()[i] = int8_t(int(rng() % 16) - 8);
  const Tensor as = positive_values({M, G}, 122, 0.01f, 1.0f),
               ws = random_values({G, N}, DType::f32, 123, 0.01f, 1.0f);
  const Tensor qd = q.to(gpu()), cd = c.to(gpu()), asd = as.to(gpu()), wsd = ws.to(gpu());
  const Tensor tiled = Tensor::empty({M, N}, DType::f32, gpu()), ref = Tensor::empty({M, N}, DType::f32, gpu());
  backend::cuda::svdq_int4_gemm(static_cast<const int8_t*>(qd.data_ptr()), static_cast<const float*>(asd.data_ptr()),
                                static_cast<const int8_t*>(cd.data_ptr()), static_cast<const float*>(wsd.data_ptr()), M,
                                N, K, static_cast<float*>(tiled.data_ptr()), 0);
  backend::cuda::svdq_int4_gemm_reference(static_cast<const int8_t*>(qd.data_ptr()),
                                          static_cast<const float*>(asd.data_ptr()),
                                          static_cast<const int8_t*>(cd.data_ptr()),
                                          static_cast<const float*>(wsd.data_ptr()), M, N, K,
                                          static_cast<float*>(ref.data_ptr()), 0);
  const std::vector<float> a = tiled.to(Device::cpu()).to_f32_vector(), r = ref.to(Device::cpu()).to_f32_vector();
  for (int64_t t = 0; t < M; ++t)
    for (int64_t n = 0; n < N; ++n) {
      float want = 0.0f;
      for (int64_t g = 0; g < G; ++g) {
        int32_t d = 0;
        for (int64_t k = g * 64; k < g * 64 + 64; ++k) d += int32_t(q.data<int8_t>()[t * K + k]) * int32_t(c.data<int8_t>()[n * K + k]);
        want = backend::cuda::blockq::svdq_group_term(want, d, as.data<float>()[t * G + g], ws.data<float>()[g * N + n]);
      }
      ASSERT_EQ(r[size_t(t * N + n)], want) << "reference " << t << "," << n;
      ASSERT_EQ(a[size_t(t * N + n)], want) << "tiled " << t << "," << n;
    }
}

// AWQ W4A16: the weight dequantized on the device (bit for bit the reference's, test_cuda_block_values.cpp),
// then the dense GEMM: within the dtype's tolerance of the CPU.
TEST(LinearQOnCuda, NunchakuAwqMatchesTheCpu) {
  DIFFQ_REQUIRE_GPU();
  const int64_t N = 64, K = 256;
  std::mt19937 rng(131);
  Tensor qw = Tensor::empty({N / 4, K / 2}, DType::i32);
  for (int64_t i = 0; i < qw.numel(); ++i) qw.data<int32_t>()[i] = int32_t(rng());
  const Tensor ws = random_values({K / 64, N}, DType::f32, 132, 0.005f, 0.05f),
               wz = random_values({K / 64, N}, DType::f32, 133, 0.0f, 0.2f);
  auto make = [&] { return std::make_shared<quant::nunchaku::AwqW4A16Weight>(qw.clone(), ws.clone(), wz.clone(), Shape{N, K}, "layer"); };
  for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(dt));
    const Tensor x = random_values({2, 3, K}, dt, 134), b = random_values({N}, dt, 135);
    EXPECT_LE(rel_err(linear_on_gpu(make(), x, b), make()->linear(x, b)), tolerance(dt));
  }
}

// Packed tensors the kernels cannot read are refused naming the scheme, the tensor and its dtype (x and the
// bias are checked before any kernel: ops/infer.cpp).
TEST(LinearQOnCuda, NunchakuRefusesUnreadableTensorsClearly) {
  DIFFQ_REQUIRE_GPU();
  auto error_of = [](const std::function<void()>& f) -> std::string {
    try {
      f();
    } catch (const std::exception& e) {
      return e.what();
    }
    return "";
  };
  auto on_gpu = [](const std::shared_ptr<QuantizedWeight>& w, const Tensor& x) {
    Parameter p(w->shape());
    p.set(w, Residency::host);
    p.move_to(gpu());
    return p.quantized().linear(x.to(gpu()), Tensor());
  };
  const auto good = random_svdq(128, 128, 16, true, 141);
  const std::vector<Tensor> st = good->storage_tensors();
  const auto bf16_scales = std::make_shared<quant::nunchaku::SvdqW4A4Weight>(st[0], st[1].to(DType::bf16), st[2], st[3],
                                                                            st[4], true, "layer");
  std::string e = error_of([&] { on_gpu(bf16_scales, random_values({3, 128}, DType::bf16, 142)); });
  EXPECT_NE(e.find("nunchaku_svdq_w4a4_int4"), std::string::npos) << e;
  EXPECT_NE(e.find("wscales"), std::string::npos) << e;
  EXPECT_NE(e.find("bfloat16"), std::string::npos) << e;

  Tensor qw = Tensor::zeros({4, 64}, DType::i32);
  const auto f16_awq = std::make_shared<quant::nunchaku::AwqW4A16Weight>(
      qw, random_values({2, 16}, DType::f16, 143), random_values({2, 16}, DType::f32, 144), Shape{16, 128}, "layer");
  e = error_of([&] { on_gpu(f16_awq, random_values({3, 128}, DType::f32, 145)); });
  EXPECT_NE(e.find("nunchaku_awq_w4a16_int4"), std::string::npos) << e;
  EXPECT_NE(e.find("float16"), std::string::npos) << e;
}
