// conv2d on oneDNN's convolution primitive (backend/cpu/onednn_conv.h) against the f64 reference conv
// (backend/reference), for the VAEs' shapes: 3x3 pad 1, 1x1, the encoder's stride-2 conv with its
// asymmetric pad, conv_in / conv_out's few channels, odd sizes, with and without bias, f32 and bf16, the
// causal 3D conv's overlapping frame windows, views that are not image-contiguous, 1 and 2 threads. Also:
// the reordered-weight cache notices a weight changed in place, the forcing switch (ConvKernel) routes
// to the path it names, and the default (ConvKernel::best) follows the CPU's features. Skips, naming
// the missing feature, where oneDNN has no native convolution of the dtype; the implicit-GEMM path runs
// the same cases everywhere.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "backend/cpu/conv.h"
#include "backend/cpu/cpu_features.h"
#include "backend/cpu/onednn_conv.h"
#include "backend/cpu/onednn_gemm.h"
#include "backend/cpu/threads.h"
#include "backend/cpu/tuning.h"
#include "core/random.h"
#include "op_harness.h"
#include "ops/ops.h"

namespace cpu = diffq::backend::cpu;
using namespace diffq;
using namespace diffq::optest;

namespace {

std::string missing(cpu::ConvElem e) {
  const auto& f = cpu::cpu_features();
  return std::string("oneDNN has no native ") + (e == cpu::ConvElem::bf16 ? "bf16" : "f32") +
         " convolution here (avx512f=" + std::to_string(f.avx512f) + ", avx512_bf16=" +
         std::to_string(f.avx512_bf16) + ", amx_bf16=" + std::to_string(f.amx_bf16) +
         "): " + cpu::onednn_conv_impl(e);
}

OpCase conv_case(const std::string& name, InputSpec x, InputSpec w, InputSpec b, int64_t stride, ops::Conv2dPad pad) {
  const double tol = x.dtype == DType::bf16 ? 1e-2 : 1e-4;
  return {name, {x, w, b}, [stride, pad](const std::vector<Tensor>& t) { return ops::conv2d(t[0], t[1], t[2], stride, pad); },
          tol};
}

// The VAE's conv shapes, scaled down, in dtype dt (weights and bias too).
std::vector<OpCase> vae_cases(DType dt) {
  const std::string d = dt == DType::bf16 ? "_bf16" : "_f32";
  auto I = [dt](Shape s, View v = View::contiguous) {
    InputSpec i;
    i.shape = std::move(s);
    i.dtype = dt;
    i.view = v;
    return i;
  };
  return {
      conv_case("resnet3x3" + d, I({1, 32, 17, 13}), I({32, 32, 3, 3}), I({32}), 1, {1, 1, 1, 1}),
      conv_case("widen3x3" + d, I({2, 16, 9, 11}), I({48, 16, 3, 3}), I({48}), 1, {1, 1, 1, 1}),
      conv_case("shortcut1x1" + d, I({2, 40, 7, 9}), I({24, 40, 1, 1}), I({24}), 1, {}),
      conv_case("conv_in" + d, I({1, 4, 10, 6}), I({64, 4, 3, 3}), I({64}), 1, {1, 1, 1, 1}),
      conv_case("conv_out" + d, I({1, 32, 19, 15}), I({3, 32, 3, 3}), I({3}), 1, {1, 1, 1, 1}),
      conv_case("downsample_s2" + d, I({1, 24, 16, 12}), I({24, 24, 3, 3}), I({24}), 2, {0, 1, 0, 1}),
      conv_case("odd_s2_pad1" + d, I({2, 5, 9, 7}), I({6, 5, 3, 3}), absent(), 2, {1, 1, 1, 1}),
      conv_case("asym_pad" + d, I({1, 3, 17, 13}), I({5, 3, 3, 3}), I({5}), 1, {2, 0, 1, 0}),
      conv_case("no_bias" + d, I({1, 16, 8, 8}), I({16, 16, 3, 3}), absent(), 1, {1, 1, 1, 1}),
      conv_case("permuted" + d, I({2, 6, 5, 7}, View::permuted), I({8, 6, 3, 3}, View::transposed), I({8}), 1,
                {1, 1, 1, 1}),
      conv_case("expanded" + d, I({3, 6, 5, 7}, View::expanded), I({8, 6, 3, 3}), I({8}), 1, {1, 1, 1, 1}),
      conv_case("offset" + d, I({1, 8, 6, 5}, View::offset), I({4, 8, 1, 1}), I({4}), 1, {}),
  };
}

// A causal 3D conv as WanCausalConv3d computes it: frames [Tp, C, H, W] viewed as To overlapping
// windows [To, kt * C, H, W] (stride_t * C * H * W apart) convolved with [O, kt * C, 3, 3].
OpCase causal_window_case(DType dt, int64_t stride_t) {
  const int64_t Tp = 6, C = 8, H = 7, W = 9, kt = 3, O = 12;
  const int64_t To = (Tp - kt) / stride_t + 1;
  InputSpec x{{Tp, C, H, W}, dt}, w{{O, kt * C, 3, 3}, dt}, b{{O}, dt};
  return {std::string("causal_windows_st") + std::to_string(stride_t) + (dt == DType::bf16 ? "_bf16" : "_f32"),
          {x, w, b},
          [=](const std::vector<Tensor>& t) {
            const Tensor win(t[0].storage(), {To, kt * C, H, W}, {stride_t * C * H * W, H * W, W, 1},
                             t[0].offset(), t[0].dtype());
            return ops::conv2d(win, t[1], t[2], 1, {1, 1, 1, 1});
          },
          dt == DType::bf16 ? 1e-2 : 1e-4};
}

cpu::Tuning with_conv(cpu::ConvKernel k) {
  cpu::Tuning t = cpu::current_tuning();
  t.conv_kernel = k;
  return t;
}

class OnednnConv : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override { cpu::set_num_threads(GetParam()); }
  void TearDown() override { cpu::set_num_threads(0); }

  // Every case with oneDNN forced, each of them run by oneDNN (its call count moves).
  static void expect_all_through_onednn(DType dt) {
    const cpu::ScopedTuning scope(with_conv(cpu::ConvKernel::onednn));
    std::vector<OpCase> cases = vae_cases(dt);
    cases.push_back(causal_window_case(dt, 1));
    cases.push_back(causal_window_case(dt, 2));
    for (const OpCase& c : cases) {
      const int64_t before = cpu::onednn_conv_stats().calls;
      run_op_case(c, Device::cpu());
      EXPECT_EQ(cpu::onednn_conv_stats().calls, before + 1) << c.name << " did not run on oneDNN";
    }
  }
};

TEST_P(OnednnConv, F32MatchesReference) {
  if (!cpu::onednn_conv_available(cpu::ConvElem::f32)) GTEST_SKIP() << missing(cpu::ConvElem::f32);
  expect_all_through_onednn(DType::f32);
}

TEST_P(OnednnConv, Bf16MatchesReference) {
  if (!cpu::onednn_conv_available(cpu::ConvElem::bf16)) GTEST_SKIP() << missing(cpu::ConvElem::bf16);
  expect_all_through_onednn(DType::bf16);
}

// The same cases on the implicit-GEMM path (forced), which never calls oneDNN's convolution.
TEST_P(OnednnConv, ImplicitGemmForcedMatchesReferenceWithoutOnednn) {
  const cpu::ScopedTuning scope(with_conv(cpu::ConvKernel::implicit_gemm));
  for (DType dt : {DType::f32, DType::bf16}) {
    std::vector<OpCase> cases = vae_cases(dt);
    cases.push_back(causal_window_case(dt, 1));
    for (const OpCase& c : cases) {
      const int64_t before = cpu::onednn_conv_stats().calls;
      run_op_case(c, Device::cpu());
      EXPECT_EQ(cpu::onednn_conv_stats().calls, before) << c.name << " ran on oneDNN";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Threads, OnednnConv, ::testing::Values(1, 2));

Tensor filled(Shape s, DType dt, float scale, float shift) {
  std::vector<float> v(size_t(shape_numel(s)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = scale * float(int(i * 7919 % 23) - 11) / 11.f + shift;
  return Tensor::from_vector(v, s, dt);
}

// A weight written in place (same address, shape and dtype) is reordered again, not served stale;
// an unchanged weight is served from the cache.
TEST(OnednnConvWeights, CacheNoticesAWeightChangedInPlace) {
  for (DType dt : {DType::f32, DType::bf16}) {
    const cpu::ConvElem e = dt == DType::bf16 ? cpu::ConvElem::bf16 : cpu::ConvElem::f32;
    if (!cpu::onednn_conv_available(e)) {
      std::cout << "[ skipped  ] " << missing(e) << "\n";
      continue;
    }
    const cpu::ScopedTuning scope(with_conv(cpu::ConvKernel::onednn));
    const Tensor x = filled({1, 16, 9, 10}, dt, 1.f, 0.f), b = filled({24}, dt, 0.5f, 0.f);
    Tensor w = filled({24, 16, 3, 3}, dt, 0.3f, 0.f);
    const Tensor first = ops::conv2d(x, w, b, 1, {1, 1, 1, 1});
    const cpu::OnednnConvStats s1 = cpu::onednn_conv_stats();
    const Tensor again = ops::conv2d(x, w, b, 1, {1, 1, 1, 1});
    const cpu::OnednnConvStats s2 = cpu::onednn_conv_stats();
    EXPECT_EQ(s2.entries, s1.entries);
    EXPECT_EQ(s2.refreshed, s1.refreshed);
    EXPECT_EQ(0, std::memcmp(first.data_ptr(), again.data_ptr(), size_t(first.numel()) * dtype_size(dt)));

    // Overwrite the weight's bytes in place with other values (the bytes of a second weight).
    const Tensor w2 = filled({24, 16, 3, 3}, dt, -0.2f, 0.1f);
    std::memcpy(w.data_ptr(), w2.data_ptr(), size_t(w.numel()) * dtype_size(dt));
    const Tensor changed = ops::conv2d(x, w, b, 1, {1, 1, 1, 1});
    // Every cached layout of it is reordered again: one, or one per band primitive whose weight layout
    // differs (oneDNN may pick another for the image's edge bands on some ISAs).
    EXPECT_GE(cpu::onednn_conv_stats().refreshed, s2.refreshed + 1);
    Tensor expect;
    {
      const cpu::ScopedTuning gemm(with_conv(cpu::ConvKernel::implicit_gemm));
      expect = ops::conv2d(x, w2, b, 1, {1, 1, 1, 1});
    }
    const std::vector<double> got = changed.to_f64_vector(), want = expect.to_f64_vector();
    double max_ref = 0, max_diff = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      max_ref = std::max(max_ref, std::fabs(want[i]));
      max_diff = std::max(max_diff, std::fabs(got[i] - want[i]));
    }
    EXPECT_LE(max_diff / max_ref, dt == DType::bf16 ? 1e-2 : 1e-4) << dtype_name(dt);
  }
}

// The switch routes each dtype to the path it names; mixed dtypes (bf16 input, f32 weights) always take
// the GEMM path.
TEST(OnednnConvSelection, ForcedKernelIsTheOneThatRuns) {
  const Tensor x = filled({1, 8, 6, 6}, DType::bf16, 1.f, 0.f), w = filled({8, 8, 3, 3}, DType::bf16, 0.3f, 0.f);
  for (const auto k : {cpu::ConvKernel::onednn, cpu::ConvKernel::implicit_gemm}) {
    const cpu::ScopedTuning scope(with_conv(k));
    for (const bool bf16 : {false, true}) {
      const cpu::ConvElem e = bf16 ? cpu::ConvElem::bf16 : cpu::ConvElem::f32;
      const bool expect = k == cpu::ConvKernel::onednn && cpu::onednn_conv_available(e);
      EXPECT_EQ(cpu::conv_uses_onednn(bf16, cpu::current_tuning()), expect);
      EXPECT_EQ(cpu::conv_kernel_name(bf16).rfind("oneDNN convolution", 0) == 0, expect) << cpu::conv_kernel_name(bf16);
      const DType dt = bf16 ? DType::bf16 : DType::f32;
      const int64_t before = cpu::onednn_conv_stats().calls;
      ops::conv2d(x.to(dt), w.to(dt), {}, 1, {1, 1, 1, 1});
      EXPECT_EQ(cpu::onednn_conv_stats().calls, before + (expect ? 1 : 0)) << dtype_name(dt);
    }
    const int64_t before = cpu::onednn_conv_stats().calls;
    ops::conv2d(x, w.to(DType::f32), {}, 1, {1, 1, 1, 1});
    EXPECT_EQ(cpu::onednn_conv_stats().calls, before) << "mixed dtypes";
  }
}

// The default: bf16 on oneDNN wherever it has a native bf16 convolution (AMX tiles, as issue 36 asks,
// and AVX512-BF16, where it measured faster than the implicit GEMM); f32 on diffq's GEMMs (oneDNN's
// AVX-512 f32 convolution measured slower here): docs/benchmarks.md "VAE convolutions on oneDNN".
TEST(OnednnConvSelection, DefaultFollowsTheCpuFeatures) {
  const cpu::ScopedTuning scope(with_conv(cpu::ConvKernel::best));
  EXPECT_EQ(cpu::conv_uses_onednn(true, cpu::current_tuning()), cpu::onednn_conv_available(cpu::ConvElem::bf16))
      << cpu::onednn_conv_impl(cpu::ConvElem::bf16);
  EXPECT_FALSE(cpu::conv_uses_onednn(false, cpu::current_tuning()));
  if (cpu::onednn_bf16_uses_amx()) {
    EXPECT_NE(cpu::onednn_conv_impl(cpu::ConvElem::bf16).find("amx"), std::string::npos)
        << cpu::onednn_conv_impl(cpu::ConvElem::bf16);
  }
  if (!cpu::onednn_conv_available(cpu::ConvElem::bf16))
    std::cout << "[ note     ] bf16 stays on the GEMM path: " << missing(cpu::ConvElem::bf16) << "\n";
}

// conv2d_add (residual + conv, the conv rounded to x's dtype first) equals the two ops bit for bit on
// every path: oneDNN's bands (the add inside each band, 1 and 2 threads) and the GEMM path (the add after
// the whole conv); f32 and bf16; a residual view; the causal conv's overlapping windows.
TEST(OnednnConvAdd, EqualsAddOfConvBitwise) {
  Generator g(9);
  for (const auto k : {cpu::ConvKernel::onednn, cpu::ConvKernel::implicit_gemm})
    for (DType dt : {DType::f32, DType::bf16})
      for (int threads : {1, 2}) {
        const cpu::ScopedTuning scope(with_conv(k));
        cpu::set_num_threads(threads);
        const Tensor x = randn_tensor({2, 16, 37, 20}, g, DType::f32).to(dt);
        const Tensor w = ops::mul_scalar(randn_tensor({24, 16, 3, 3}, g, DType::f32), 0.2).to(dt);
        const Tensor b = randn_tensor({24}, g, DType::f32).to(dt);
        const Tensor r = randn_tensor({2, 20, 37, 24}, g, DType::f32).to(dt).permute({0, 3, 2, 1});  // a view
        const Tensor fused = ops::conv2d_add(x, w, b, 1, {1, 1, 1, 1}, r);
        const Tensor chain = ops::add(r, ops::conv2d(x, w, b, 1, {1, 1, 1, 1}));
        const Tensor fc = fused.contiguous(), cc = chain.contiguous();
        ASSERT_EQ(fc.shape(), cc.shape());
        EXPECT_EQ(std::memcmp(fc.data_ptr(), cc.data_ptr(), size_t(fc.numel()) * dtype_size(dt)), 0)
            << (k == cpu::ConvKernel::onednn ? "oneDNN" : "implicit GEMM") << " " << dtype_name(dt) << ", " << threads
            << " threads";
      }
  cpu::set_num_threads(0);
}

}  // namespace
