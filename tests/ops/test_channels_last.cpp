// Channels-last images (ops::ImageLayout) on the CPU: the oneDNN convolution reads and writes them in place
// and computes the same bits as on channels-first images (same bands, same primitives; conv2d_add's
// residual too); the channels-last group norm's statistics do not depend on the thread count, and its
// values lie as close to the f64 reference as the channels-first kernel's; the layout the CPU asks the
// VAEs for follows its oneDNN convolution, and DIFFQ_IMAGE_LAYOUT's choices (the tuning) force either.
// The op table (op_cases.h, *_cl cases) holds every channels-last path to the reference as well.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "backend/cpu/conv.h"
#include "backend/cpu/cpu_features.h"
#include "backend/cpu/onednn_conv.h"
#include "backend/cpu/onednn_gemm.h"
#include "backend/cpu/threads.h"
#include "backend/cpu/tuning.h"
#include "backend/reference/reference_ops.h"
#include "core/random.h"
#include "diffq/error.h"
#include "expect_bits.h"
#include "ops/ops.h"

namespace cpu = diffq::backend::cpu;
using namespace diffq;

namespace {

constexpr auto kLast = ops::ImageLayout::channels_last;

cpu::Tuning with(cpu::ConvKernel k, cpu::ImageLayoutChoice l = cpu::ImageLayoutChoice::best) {
  cpu::Tuning t = cpu::current_tuning();
  t.conv_kernel = k;
  t.image_layout = l;
  return t;
}

// conv2d (and conv2d_add) of channels-last images equals the channels-first op's result moved to
// channels-last, bit for bit, on oneDNN's bands: the VAE's 3x3 (several bands per image), its stride-2
// downsampling with the asymmetric pad, a 1x1 shortcut; f32 and bf16; 1 and 2 threads.
TEST(ChannelsLastConv, OnednnEqualsChannelsFirstBitwise) {
  Generator g(5);
  for (DType dt : {DType::f32, DType::bf16}) {
    const cpu::ConvElem e = dt == DType::bf16 ? cpu::ConvElem::bf16 : cpu::ConvElem::f32;
    if (!cpu::onednn_conv_available(e) || !cpu::onednn_conv_runs_channels_last(e)) {
      std::cout << "[ skipped  ] " << dtype_name(dt) << ": oneDNN's convolution here is not channels-last ("
                << cpu::onednn_conv_impl(e) << ")\n";
      continue;
    }
    const cpu::ScopedTuning scope(with(cpu::ConvKernel::onednn));
    struct Case {
      int64_t c, o, k, stride;
      ops::Conv2dPad pad;
    };
    for (const Case& k : {Case{16, 24, 3, 1, {1, 1, 1, 1}}, Case{16, 16, 3, 2, {0, 1, 0, 1}}, Case{16, 8, 1, 1, {}}})
      for (int threads : {1, 2}) {
        cpu::set_num_threads(threads);
        const Tensor x = randn_tensor({2, k.c, 45, 20}, g, DType::f32).to(dt);
        const Tensor w = ops::mul_scalar(randn_tensor({k.o, k.c, k.k, k.k}, g, DType::f32), 0.2).to(dt);
        const Tensor b = randn_tensor({k.o}, g, DType::f32).to(dt);
        const Tensor first = ops::conv2d(x, w, b, k.stride, k.pad);
        const Tensor r = randn_tensor(first.shape(), g, DType::f32).to(dt);
        const int64_t before = cpu::onednn_conv_stats().calls;
        const Tensor last = ops::conv2d(ops::to_channels_last(x), w, b, k.stride, k.pad, kLast);
        const Tensor last_add =
            ops::conv2d_add(ops::to_channels_last(x), w, b, k.stride, k.pad, ops::to_channels_last(r), kLast);
        EXPECT_EQ(cpu::onednn_conv_stats().calls, before + 2) << "the channels-last convs did not run on oneDNN";
        const std::string what = std::string(dtype_name(dt)) + " " + std::to_string(k.k) + "x" +
                                 std::to_string(k.k) + " stride " + std::to_string(k.stride) + ", " +
                                 std::to_string(threads) + " threads";
        expect_bits_equal(last, ops::to_channels_last(first), "conv2d " + what);
        expect_bits_equal(last_add, ops::to_channels_last(ops::add(r, first)), "conv2d_add " + what);
      }
  }
  cpu::set_num_threads(0);
}

// The GEMM path (forced) takes channels-last images by way of channels-first copies: the same bits.
TEST(ChannelsLastConv, GemmPathEqualsChannelsFirstBitwise) {
  Generator g(6);
  const cpu::ScopedTuning scope(with(cpu::ConvKernel::implicit_gemm));
  for (DType dt : {DType::f32, DType::bf16}) {
    const Tensor x = randn_tensor({2, 8, 11, 9}, g, DType::f32).to(dt);
    const Tensor w = ops::mul_scalar(randn_tensor({12, 8, 3, 3}, g, DType::f32), 0.2).to(dt);
    const Tensor b = randn_tensor({12}, g, DType::f32).to(dt);
    const Tensor r = randn_tensor({2, 11, 9, 12}, g, DType::f32).to(dt);
    const int64_t before = cpu::onednn_conv_stats().calls;
    expect_bits_equal(ops::conv2d_add(ops::to_channels_last(x), w, b, 1, {1, 1, 1, 1}, r, kLast),
                      ops::add(r, ops::to_channels_last(ops::conv2d(x, w, b, 1, {1, 1, 1, 1}))), std::string(dtype_name(dt)));
    EXPECT_EQ(cpu::onednn_conv_stats().calls, before);
  }
}

// The channels-last group norm (+ silu): the same bits at 1 and 2 threads (the chunks' sums are added in
// chunk order), and no further from the f64 reference than the channels-first kernel, on activations
// with a mean far from zero (the shifted one-pass moments) and on the VAE's 32 groups.
TEST(ChannelsLastGroupNorm, ThreadCountInvariantAndAsCloseAsChannelsFirst) {
  Generator g(7);
  for (DType dt : {DType::f32, DType::bf16})
    for (bool silu : {false, true}) {
      const Tensor x = ops::add_scalar(ops::mul_scalar(randn_tensor({2, 64, 37, 29}, g, DType::f32), 0.5), 40.0).to(dt);
      const Tensor w = randn_tensor({64}, g, DType::f32).to(dt), b = randn_tensor({64}, g, DType::f32).to(dt);
      auto norm = [&](const Tensor& in, ops::ImageLayout l) {
        return silu ? ops::group_norm_silu(in, 32, w, b, 1e-6, l) : ops::group_norm(in, 32, w, b, 1e-6, l);
      };
      const Tensor xl = ops::to_channels_last(x);
      cpu::set_num_threads(1);
      const Tensor one = norm(xl, kLast);
      cpu::set_num_threads(2);
      const Tensor two = norm(xl, kLast);
      cpu::set_num_threads(0);
      const std::string what = std::string(dtype_name(dt)) + (silu ? " silu" : "");
      expect_bits_equal(one, two, what);
      const Tensor first = norm(x, ops::ImageLayout::channels_first);
      ops::OpCall call{ops::OpKind::group_norm, {x, w, b}, {}};
      call.attrs.i0 = 32;
      call.attrs.f0 = 1e-6;
      call.attrs.flag = silu;
      const reference::Array want = reference::run(call);  // channels-first, f64
      auto max_err = [&](const Tensor& got) {              // got channels-first
        const std::vector<float> a = got.to_f32_vector();
        double m = 0;
        for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(double(a[i]) - want.v[i]));
        return m;
      };
      const double e_last = max_err(ops::to_channels_first(one)), e_first = max_err(first);
      std::cout << "[channels-last] group norm " << what << ": max abs error " << e_last << " (channels-first "
                << e_first << ")\n";
      EXPECT_LE(e_last, std::max(1.5 * e_first, dt == DType::f32 ? 1e-5 : 0.0)) << what;
    }
}

// The layout the CPU asks the VAEs for: channels-last for the dtypes oneDNN's convolution runs channels-
// last by default (bf16 with AVX512-BF16 or AMX-BF16; not f32, which stays on diffq's GEMMs), else
// channels-first; the implicit-GEMM switch makes it channels-first; the image_layout choice forces either.
TEST(ChannelsLastPreference, FollowsTheConvolutionAndIsForceable) {
  const auto& f = cpu::cpu_features();
  {
    const cpu::ScopedTuning scope(with(cpu::ConvKernel::best));
    const bool bf16_native = cpu::onednn_conv_available(cpu::ConvElem::bf16);
    EXPECT_EQ(ops::prefers_channels_last(Device::cpu(), DType::bf16),
              bf16_native && cpu::onednn_conv_runs_channels_last(cpu::ConvElem::bf16))
        << cpu::onednn_conv_impl(cpu::ConvElem::bf16);
    // oneDNN's brgemm convolutions (AVX512-BF16, AMX) are channels-last; its older jit ones (bf16 emulated on
    // plain AVX-512, e.g. under DNNL_MAX_CPU_ISA=AVX512_CORE) blocked.
    const std::string impl = cpu::onednn_conv_impl(cpu::ConvElem::bf16);
    if (bf16_native && impl.find("brg") != std::string::npos)
      EXPECT_TRUE(ops::prefers_channels_last(Device::cpu(), DType::bf16)) << impl;
    if (f.amx_bf16 && cpu::onednn_bf16_uses_amx()) EXPECT_NE(impl.find("brg"), std::string::npos) << impl;
    if (!bf16_native)
      std::cout << "[ note     ] bf16 images stay channels-first: " << cpu::onednn_conv_impl(cpu::ConvElem::bf16) << "\n";
    EXPECT_FALSE(ops::prefers_channels_last(Device::cpu(), DType::f32));
    EXPECT_FALSE(ops::prefers_channels_last(Device::cpu(), DType::f16));
  }
  {
    const cpu::ScopedTuning scope(with(cpu::ConvKernel::implicit_gemm));
    EXPECT_FALSE(ops::prefers_channels_last(Device::cpu(), DType::bf16));
  }
  for (DType dt : {DType::f32, DType::bf16}) {
    {
      const cpu::ScopedTuning scope(with(cpu::ConvKernel::best, cpu::ImageLayoutChoice::channels_last));
      EXPECT_TRUE(ops::prefers_channels_last(Device::cpu(), dt));
    }
    const cpu::ScopedTuning scope(with(cpu::ConvKernel::best, cpu::ImageLayoutChoice::channels_first));
    EXPECT_FALSE(ops::prefers_channels_last(Device::cpu(), dt));
  }
}

TEST(ChannelsLastOps, BadLayoutAndShapesAreNamed) {
  const Tensor x = Tensor::zeros({1, 4, 4, 3}, DType::f32);
  ops::OpCall call{ops::OpKind::upsample_nearest2x, {x}, {}};
  call.attrs.i1 = 7;
  try {
    ops::infer(call);
    FAIL() << "a layout of 7 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layout attribute 7"), std::string::npos) << e.what();
  }
  // channels-last conv: x's last dim must be w's input channels
  try {
    ops::conv2d(x, Tensor::zeros({2, 4, 3, 3}, DType::f32), {}, 1, {1, 1, 1, 1}, kLast);
    FAIL() << "3 channels against a weight for 4 were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[N, H, W, C]"), std::string::npos) << e.what();
  }
}

}  // namespace
