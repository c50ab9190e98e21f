// cuDNN's fused flash attention (src/backend/cuda/cudnn_sdpa.cpp) and convolution (cudnn_conv.cpp)
// against an f64 reference computed here from the same rounded inputs, the CPU backend and the simple
// CUDA kernel: bf16/fp16, head dims 64 and 128, Sq != Sk, strided views (used in place or copied first),
// FLUX's joint shape scaled down and at full size, Wan's self (32760 tokens) and cross attention
// (sampled rows), the plan caches hitting on the second call, and the calls cuDNN must leave to the
// simple kernel (masks, float32, DIFFQ_CUDA_SDPA=simple). The CudnnInfo and CudnnGraphs tests need no GPU.
#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "backend/cuda/cudnn_info.h"
#include "backend/cuda/cudnn_ops.h"
#include "diffq/error.h"
#include "gpu_test.h"
#include "ops/ops.h"

using namespace diffq;
using namespace diffq::cudatest;
using backend::cuda::cudnn_conv2d_stats;
using backend::cuda::cudnn_sdpa_stats;

namespace {

// Sets an environment variable for a scope (restoring the previous value).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* old = std::getenv(name);
    had_ = old != nullptr;
    if (had_) old_ = old;
    if (value)
      setenv(name, value, 1);
    else
      unsetenv(name);
  }
  ~ScopedEnv() {
    if (had_)
      setenv(name_, old_.c_str(), 1);
    else
      unsetenv(name_);
  }

 private:
  const char* name_;
  bool had_ = false;
  std::string old_;
};

double tol_of(DType dt) { return dt == DType::bf16 ? 1e-2 : dt == DType::f16 ? 5e-3 : 1e-4; }

// Random values in +-[0, 1] rounded to dt (scores of moderate size: a softmax neither flat nor one-hot).
Tensor rnd(const Shape& s, DType dt, uint32_t seed) { return random_values(s, dt, seed, 0.0f, 1.0f); }

// max |got - f64 reference| / max |reference| over the given (b, h, i) query rows of sdpa(q, k, v)
// (CPU tensors of any layout); rows empty: every row.
struct Row {
  int64_t b, h, i;
};
double sdpa_error_vs_f64(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& got, double scale,
                         std::vector<Row> rows = {}) {
  const int64_t B = q.size(0), H = q.size(1), Sq = q.size(2), D = q.size(3), Sk = k.size(2), Dv = v.size(3);
  const std::vector<float> qf = q.contiguous().to_f32_vector(), kf = k.contiguous().to_f32_vector(),
                           vf = v.contiguous().to_f32_vector(), of = got.contiguous().to_f32_vector();
  if (rows.empty())
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < Sq; ++i) rows.push_back({b, h, i});
  double max_err = 0, max_ref = 1e-30;
  std::vector<double> s(static_cast<size_t>(Sk)), acc(static_cast<size_t>(Dv));
  for (const Row& r : rows) {
    const float* qr = &qf[size_t(((r.b * H + r.h) * Sq + r.i) * D)];
    double m = -INFINITY;
    for (int64_t j = 0; j < Sk; ++j) {
      const float* kr = &kf[size_t(((r.b * H + r.h) * Sk + j) * D)];
      double dot = 0;
      for (int64_t d = 0; d < D; ++d) dot += double(qr[d]) * kr[d];
      s[size_t(j)] = dot * scale;
      m = std::max(m, s[size_t(j)]);
    }
    double l = 0;
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int64_t j = 0; j < Sk; ++j) {
      const double p = std::exp(s[size_t(j)] - m);
      l += p;
      const float* vr = &vf[size_t(((r.b * H + r.h) * Sk + j) * Dv)];
      for (int64_t d = 0; d < Dv; ++d) acc[size_t(d)] += p * vr[d];
    }
    const float* orow = &of[size_t(((r.b * H + r.h) * Sq + r.i) * Dv)];
    for (int64_t d = 0; d < Dv; ++d) {
      const double want = acc[size_t(d)] / l;
      EXPECT_FALSE(std::isnan(orow[d])) << "row " << r.b << "," << r.h << "," << r.i;
      max_err = std::max(max_err, std::abs(double(orow[d]) - want));
      max_ref = std::max(max_ref, std::abs(want));
    }
  }
  return max_err / max_ref;
}

double rel_diff(const Tensor& a, const Tensor& b) {
  const std::vector<float> x = a.contiguous().to_f32_vector(), y = b.contiguous().to_f32_vector();
  EXPECT_EQ(x.size(), y.size());
  double e = 0, m = 1e-30;
  for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
    e = std::max(e, std::abs(double(x[i]) - y[i]));
    m = std::max(m, std::abs(double(y[i])));
  }
  return e / m;
}

// Runs sdpa on the GPU and expects cuDNN to have taken it (one more cuDNN run).
Tensor sdpa_on_cudnn(const Tensor& q, const Tensor& k, const Tensor& v, double scale = 0.0) {
  const int64_t before = cudnn_sdpa_stats().runs;
  const Tensor out = ops::sdpa(q, k, v, {}, scale).to(Device::cpu());
  EXPECT_EQ(cudnn_sdpa_stats().runs, before + 1) << "cuDNN declined: " << cudnn_sdpa_stats().last_rejection;
  return out;
}

// Query rows spread over the sequence (first, last, and strided in between) of every (b, h).
std::vector<Row> sample_rows(int64_t B, int64_t H, int64_t Sq, int per_head) {
  std::vector<Row> rows;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int t = 0; t < per_head; ++t) rows.push_back({b, h, per_head == 1 ? 0 : t * (Sq - 1) / (per_head - 1)});
  return rows;
}

#define DIFFQ_REQUIRE_CUDNN()                                                          \
  do {                                                                                 \
    DIFFQ_REQUIRE_GPU();                                                               \
    if (!backend::cuda::cudnn_built()) GTEST_SKIP() << "this build has no cuDNN";      \
  } while (0)

}  // namespace

TEST(CudnnInfo, ReportsTheSdpaChoiceAndCudnnVersionWithoutAGpu) {
  EXPECT_FALSE(backend::cuda::cudnn_version_description().empty());
  EXPECT_FALSE(backend::cuda::cuda_conv2d_kernel_description().empty());
  {
    ScopedEnv e("DIFFQ_CUDA_SDPA", "simple");
    EXPECT_TRUE(backend::cuda::sdpa_forced_simple());
    EXPECT_NE(backend::cuda::cuda_sdpa_kernel_description().find("simple"), std::string::npos);
  }
  {
    ScopedEnv e("DIFFQ_CUDA_SDPA", nullptr);
    EXPECT_FALSE(backend::cuda::sdpa_forced_simple());
    if (backend::cuda::cudnn_built()) {
      EXPECT_NE(backend::cuda::cuda_sdpa_kernel_description().find("cuDNN"), std::string::npos);
    }
  }
  {
    ScopedEnv e("DIFFQ_CUDA_SDPA", "fast");
    EXPECT_THROW(backend::cuda::sdpa_forced_simple(), Error);
    EXPECT_NE(backend::cuda::cuda_sdpa_kernel_description().find("fast"), std::string::npos);
  }
  if (backend::cuda::cudnn_built() && backend::cuda::device_count() == 0) {
    EXPECT_NE(backend::cuda::cudnn_version_description().find("compiled against"), std::string::npos);
  }
}

// The cuDNN frontend's own validation (attributes, shapes, strides, the sdpa support surface for
// Hopper) of the graphs the CUDA backend builds, run without a GPU.
TEST(CudnnGraphs, FrontendValidatesTheGraphsForHopperWithoutAGpu) {
  if (!backend::cuda::cudnn_built()) GTEST_SKIP() << "this build has no cuDNN";
  using backend::cuda::ConvPlanKey;
  using backend::cuda::SdpaPlanKey;
  auto sdpa_key = [](DType dt, int64_t H, int64_t Sq, int64_t Sk, int64_t D) {
    SdpaPlanKey k;
    k.dtype = dt;
    k.B = 1, k.H = H, k.Sq = Sq, k.Sk = Sk, k.D = D, k.Dv = D;
    k.q = {Sq * H * D, D, H * D, 1};  // [B, S, H, D] permuted: FLUX's and Wan's layout
    k.k = k.v = {Sk * H * D, D, H * D, 1};
    k.o = {H * Sq * D, Sq * D, D, 1};
    k.scale = float(1.0 / std::sqrt(double(D)));
    return k;
  };
  struct SdpaCase {
    const char* name;
    SdpaPlanKey key;
  };
  for (const SdpaCase& c : {SdpaCase{"FLUX joint", sdpa_key(DType::bf16, 24, 4608, 4608, 128)},
                            SdpaCase{"Wan self", sdpa_key(DType::bf16, 12, 32760, 32760, 128)},
                            SdpaCase{"Wan cross", sdpa_key(DType::bf16, 12, 32760, 512, 128)},
                            SdpaCase{"fp16 D=64", sdpa_key(DType::f16, 3, 77, 200, 64)},
                            SdpaCase{"D=256", sdpa_key(DType::bf16, 2, 50, 70, 256)}})
    EXPECT_EQ(backend::cuda::cudnn_sdpa_validate_offline(c.key, 90), "") << c.name;
  // A head dim that is not a multiple of 8 is refused (not a vacuous check; cudnn_sdpa.cpp never offers one).
  EXPECT_NE(backend::cuda::cudnn_sdpa_validate_offline(sdpa_key(DType::bf16, 2, 16, 16, 12), 90), "");

  auto conv_key = [](DType dt, int64_t C, int64_t H, int64_t O, int64_t kh, int64_t stride,
                     std::array<int64_t, 4> pad, bool bias) {
    ConvPlanKey k;
    k.dtype = dt;
    k.N = 1, k.C = C, k.H = H, k.W = H + 3, k.O = O, k.KH = kh, k.KW = kh, k.stride = stride;
    k.pad = pad;
    k.bias = bias;
    return k;
  };
  EXPECT_EQ(backend::cuda::cudnn_conv2d_validate_offline(conv_key(DType::bf16, 128, 64, 128, 3, 1, {1, 1, 1, 1}, true), 90), "");
  EXPECT_EQ(backend::cuda::cudnn_conv2d_validate_offline(conv_key(DType::bf16, 64, 33, 64, 3, 2, {0, 0, 1, 1}, true), 90), "");
  EXPECT_EQ(backend::cuda::cudnn_conv2d_validate_offline(conv_key(DType::f32, 5, 9, 6, 3, 2, {0, 0, 1, 1}, false), 90), "");
  EXPECT_EQ(backend::cuda::cudnn_conv2d_validate_offline(conv_key(DType::f16, 4, 6, 2, 1, 1, {0, 0, 0, 0}, true), 90), "");
}

TEST(CudnnSdpa, MatchesF64AndCpuBackendBf16Fp16HeadDims64And128) {
  DIFFQ_REQUIRE_CUDNN();
  struct Shape2 {
    int64_t sq, sk;
  };
  uint32_t seed = 1;
  for (DType dt : {DType::bf16, DType::f16})
    for (int64_t D : {64, 128})
      for (Shape2 s : {Shape2{64, 64}, Shape2{77, 200}, Shape2{256, 33}}) {
        SCOPED_TRACE(cat(dtype_name(dt), " D=", D, " Sq=", s.sq, " Sk=", s.sk));
        const Tensor q = rnd({2, 3, s.sq, D}, dt, seed++), k = rnd({2, 3, s.sk, D}, dt, seed++),
                     v = rnd({2, 3, s.sk, D}, dt, seed++);
        const Tensor got = sdpa_on_cudnn(q.to(gpu()), k.to(gpu()), v.to(gpu()));
        EXPECT_EQ(got.dtype(), dt);
        EXPECT_LE(sdpa_error_vs_f64(q, k, v, got, 1.0 / std::sqrt(double(D))), tol_of(dt));
        EXPECT_LE(rel_diff(got, ops::sdpa(q, k, v)), tol_of(dt)) << "vs the CPU backend";
      }
}

TEST(CudnnSdpa, OtherHeadDimsAndAnExplicitScale) {
  DIFFQ_REQUIRE_CUDNN();
  // Multiples of 8 up to 256 (Hopper's limit): cuDNN takes them or declines and the simple kernel runs;
  // either way the result is right. D = 12 is never offered to cuDNN.
  uint32_t seed = 100;
  for (int64_t D : {8, 12, 40, 96, 256}) {
    SCOPED_TRACE(cat("D=", D));
    const Tensor q = rnd({1, 2, 50, D}, DType::bf16, seed++), k = rnd({1, 2, 70, D}, DType::bf16, seed++),
                 v = rnd({1, 2, 70, D}, DType::bf16, seed++);
    const int64_t before = cudnn_sdpa_stats().runs;
    const Tensor got = ops::sdpa(q.to(gpu()), k.to(gpu()), v.to(gpu()), {}, 0.3).to(Device::cpu());
    const bool on_cudnn = cudnn_sdpa_stats().runs == before + 1;
    std::cout << "D=" << D << ": " << (on_cudnn ? "cuDNN" : "simple kernel (" + cudnn_sdpa_stats().last_rejection + ")")
              << "\n";
    if (D == 12) {
      EXPECT_FALSE(on_cudnn);
    }
    EXPECT_LE(sdpa_error_vs_f64(q, k, v, got, 0.3), tol_of(DType::bf16));
  }
}

TEST(CudnnSdpa, StridedViewsInPlaceAndCopied) {
  DIFFQ_REQUIRE_CUDNN();
  const int64_t B = 2, S = 96, H = 4, D = 64;
  // [B, S, H, D] permuted to [B, H, S, D]: strides {S*H*D, D, H*D, 1}, taken in place.
  const Tensor qs = rnd({B, S, H, D}, DType::bf16, 7), ks = rnd({B, S, H, D}, DType::bf16, 8),
               vs = rnd({B, S, H, D}, DType::bf16, 9);
  const Tensor q = qs.permute({0, 2, 1, 3}), k = ks.permute({0, 2, 1, 3}), v = vs.permute({0, 2, 1, 3});
  const Tensor got = sdpa_on_cudnn(qs.to(gpu()).permute({0, 2, 1, 3}), ks.to(gpu()).permute({0, 2, 1, 3}),
                                   vs.to(gpu()).permute({0, 2, 1, 3}));
  EXPECT_LE(sdpa_error_vs_f64(q, k, v, got, 1.0 / 8.0), tol_of(DType::bf16));

  // Rows 68 elements apart (not a multiple of 8) and a head dim that is not contiguous: copied first.
  const Tensor wide = rnd({B, H, S, 68}, DType::bf16, 10);
  const Tensor kt = rnd({B, H, D, S}, DType::bf16, 11);
  const Tensor q2 = wide.slice(3, 0, D), k2 = kt.transpose(2, 3);
  const Tensor got2 = sdpa_on_cudnn(wide.to(gpu()).slice(3, 0, D), kt.to(gpu()).transpose(2, 3), v.to(gpu()));
  EXPECT_LE(sdpa_error_vs_f64(q2, k2, v, got2, 1.0 / 8.0), tol_of(DType::bf16));
}

TEST(CudnnSdpa, FluxJointShapeScaledDownMatchesTheSimpleKernel) {
  DIFFQ_REQUIRE_CUDNN();
  // FLUX's joint attention is [1, 24, 512 text + 4096 image, 128] from [B, S, H, D] projections.
  const int64_t S = 64 + 512, H = 4, D = 128;
  const Tensor qs = rnd({1, S, H, D}, DType::bf16, 21), ks = rnd({1, S, H, D}, DType::bf16, 22),
               vs = rnd({1, S, H, D}, DType::bf16, 23);
  const Tensor qg = qs.to(gpu()).permute({0, 2, 1, 3}), kg = ks.to(gpu()).permute({0, 2, 1, 3}),
               vg = vs.to(gpu()).permute({0, 2, 1, 3});
  const Tensor got = sdpa_on_cudnn(qg, kg, vg);
  Tensor simple;
  {
    ScopedEnv e("DIFFQ_CUDA_SDPA", "simple");
    simple = ops::sdpa(qg, kg, vg).to(Device::cpu());
  }
  EXPECT_LE(rel_diff(got, simple), tol_of(DType::bf16)) << "vs the simple kernel";
  EXPECT_LE(sdpa_error_vs_f64(qs.permute({0, 2, 1, 3}), ks.permute({0, 2, 1, 3}), vs.permute({0, 2, 1, 3}), got,
                              1.0 / std::sqrt(128.0)),
            tol_of(DType::bf16));
}

// Full-size shapes: the f64 reference on sampled query rows only. Prints cuDNN's time per call.
static void full_size_case(const char* name, int64_t H, int64_t Sq, int64_t Sk, int64_t D, uint32_t seed) {
  SCOPED_TRACE(name);
  const Tensor qs = rnd({1, Sq, H, D}, DType::bf16, seed), ks = rnd({1, Sk, H, D}, DType::bf16, seed + 1),
               vs = rnd({1, Sk, H, D}, DType::bf16, seed + 2);
  const Tensor qg = qs.to(gpu()).permute({0, 2, 1, 3}), kg = ks.to(gpu()).permute({0, 2, 1, 3}),
               vg = vs.to(gpu()).permute({0, 2, 1, 3});
  const Tensor got = sdpa_on_cudnn(qg, kg, vg);  // builds the plan
  const auto t0 = std::chrono::steady_clock::now();
  constexpr int kReps = 5;
  for (int i = 0; i < kReps; ++i) ops::sdpa(qg, kg, vg);
  cudaDeviceSynchronize();
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / kReps;
  const double tflops = 4.0 * H * double(Sq) * double(Sk) * D / (ms * 1e-3) / 1e12;
  std::cout << name << " [1, " << H << ", " << Sq << " x " << Sk << ", " << D << "] bf16 on cuDNN: " << ms
            << " ms (" << tflops << " TFLOP/s, wall time with synchronisation)\n";
  EXPECT_LE(sdpa_error_vs_f64(qs.permute({0, 2, 1, 3}), ks.permute({0, 2, 1, 3}), vs.permute({0, 2, 1, 3}), got,
                              1.0 / std::sqrt(double(D)), sample_rows(1, H, Sq, 5)),
            tol_of(DType::bf16));
}

TEST(CudnnSdpa, FluxFullShapeSampledRows) {
  DIFFQ_REQUIRE_CUDNN();
  full_size_case("FLUX joint", 24, 4608, 4608, 128, 31);
}

TEST(CudnnSdpa, WanSelfAndCrossAttentionSampledRows) {
  DIFFQ_REQUIRE_CUDNN();
  // Wan 2.1 at 832x480x81 frames: 21 x 30 x 52 = 32760 latent tokens; cross attention to 512 text tokens.
  full_size_case("Wan self", 2, 32760, 32760, 128, 41);
  full_size_case("Wan cross", 2, 32760, 512, 128, 51);
}

TEST(CudnnSdpa, PlanCacheHitsOnTheSecondCall) {
  DIFFQ_REQUIRE_CUDNN();
  backend::cuda::cudnn_sdpa_reset();
  const Tensor q = rnd({1, 2, 40, 64}, DType::bf16, 61).to(gpu()), k = rnd({1, 2, 50, 64}, DType::bf16, 62).to(gpu()),
               v = rnd({1, 2, 50, 64}, DType::bf16, 63).to(gpu());
  sdpa_on_cudnn(q, k, v);
  backend::cuda::CudnnOpStats st = cudnn_sdpa_stats();
  EXPECT_EQ(st.plans.misses, 1);
  EXPECT_EQ(st.plans.hits, 0);
  EXPECT_EQ(st.plans.entries, 1);
  const Tensor a = sdpa_on_cudnn(q, k, v);
  st = cudnn_sdpa_stats();
  EXPECT_EQ(st.plans.misses, 1);
  EXPECT_EQ(st.plans.hits, 1);
  EXPECT_EQ(st.runs, 2);
  sdpa_on_cudnn(q, k, v, 0.2);  // another scale: another plan
  EXPECT_EQ(cudnn_sdpa_stats().plans.misses, 2);
  EXPECT_EQ(cudnn_sdpa_stats().plans.entries, 2);
  // Fresh tensors of the same shape hit too.
  sdpa_on_cudnn(rnd({1, 2, 40, 64}, DType::bf16, 64).to(gpu()), k, v);
  EXPECT_EQ(cudnn_sdpa_stats().plans.hits, 2);
}

TEST(CudnnSdpa, MasksFloat32AndEnvSimpleTakeTheSimpleKernel) {
  DIFFQ_REQUIRE_CUDNN();
  const Tensor q = rnd({1, 2, 16, 64}, DType::bf16, 71), k = rnd({1, 2, 24, 64}, DType::bf16, 72),
               v = rnd({1, 2, 24, 64}, DType::bf16, 73);
  const Tensor qg = q.to(gpu()), kg = k.to(gpu()), vg = v.to(gpu());
  const int64_t runs = cudnn_sdpa_stats().runs;
  const Tensor mask = rnd({1, 1, 16, 24}, DType::f32, 74);
  const Tensor masked = ops::sdpa(qg, kg, vg, mask.to(gpu())).to(Device::cpu());
  EXPECT_NE(cudnn_sdpa_stats().last_rejection.find("mask"), std::string::npos);
  EXPECT_LE(rel_diff(masked, ops::sdpa(q, k, v, mask)), tol_of(DType::bf16));
  const Tensor f32 = ops::sdpa(qg.to(DType::f32), kg.to(DType::f32), vg.to(DType::f32)).to(Device::cpu());
  EXPECT_NE(cudnn_sdpa_stats().last_rejection.find("float32"), std::string::npos);
  EXPECT_LE(rel_diff(f32, ops::sdpa(q.to(DType::f32), k.to(DType::f32), v.to(DType::f32))), 1e-4);
  {
    ScopedEnv e("DIFFQ_CUDA_SDPA", "simple");
    const Tensor simple = ops::sdpa(qg, kg, vg).to(Device::cpu());
    EXPECT_LE(sdpa_error_vs_f64(q, k, v, simple, 1.0 / 8.0), tol_of(DType::bf16));
  }
  EXPECT_EQ(cudnn_sdpa_stats().runs, runs);  // none of these ran on cuDNN
  {
    ScopedEnv e("DIFFQ_CUDA_SDPA", "fast");
    EXPECT_THROW(ops::sdpa(qg, kg, vg), Error);
  }
}

// conv2d on cuDNN against the CPU backend (the op table, tests/cuda/test_cuda_op_table.cpp, runs the
// small cases; these are VAE-sized ones and the cache).
TEST(CudnnConv2d, MatchesCpuBackendAndCachesPlans) {
  DIFFQ_REQUIRE_CUDNN();
  backend::cuda::cudnn_conv2d_reset();
  struct Case {
    const char* name;
    Shape x, w;
    DType dt;
    int64_t stride;
    ops::Conv2dPad pad;
    bool bias;
  };
  const std::vector<Case> cases = {
      {"VAE 3x3 bf16", {1, 128, 64, 64}, {128, 128, 3, 3}, DType::bf16, 1, {1, 1, 1, 1}, true},
      {"VAE downsample bf16 (asymmetric)", {1, 64, 33, 33}, {64, 64, 3, 3}, DType::bf16, 2, {0, 1, 0, 1}, true},
      {"f32 3x3, K = 2304 (TF32 would miss 1e-4)", {1, 256, 24, 24}, {64, 256, 3, 3}, DType::f32, 1, {1, 1, 1, 1}, true},
      {"fp16 1x1 no bias", {2, 32, 20, 28}, {48, 32, 1, 1}, DType::f16, 1, {0, 0, 0, 0}, false},
  };
  uint32_t seed = 200;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const Tensor x = rnd(c.x, c.dt, seed++), w = rnd(c.w, c.dt, seed++);
    const Tensor b = c.bias ? rnd({c.w[0]}, c.dt, seed++) : Tensor();
    const Tensor want = ops::conv2d(x, w, b, c.stride, c.pad);
    const int64_t runs = cudnn_conv2d_stats().runs;
    const Tensor bg = c.bias ? b.to(gpu()) : Tensor();
    const Tensor got = ops::conv2d(x.to(gpu()), w.to(gpu()), bg, c.stride, c.pad).to(Device::cpu());
    EXPECT_EQ(cudnn_conv2d_stats().runs, runs + 1);
    ASSERT_EQ(got.shape(), want.shape());
    EXPECT_LE(rel_diff(got, want), tol_of(c.dt)) << "vs the CPU backend";
    const int64_t hits = cudnn_conv2d_stats().plans.hits, misses = cudnn_conv2d_stats().plans.misses;
    ops::conv2d(x.to(gpu()), w.to(gpu()), bg, c.stride, c.pad);
    EXPECT_GT(cudnn_conv2d_stats().plans.hits, hits) << "the second call reuses the plan";
    EXPECT_EQ(cudnn_conv2d_stats().plans.misses, misses);
    std::cout << c.name << ": plans " << cudnn_conv2d_stats().plans.entries << ", last rejection: "
              << cudnn_conv2d_stats().last_rejection << "\n";
  }
}
