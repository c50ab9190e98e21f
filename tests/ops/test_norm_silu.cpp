// group_norm_silu and channel_norm_silu against the two ops each replaces (silu(norm(x)): the FLUX and Wan
// VAEs' norm + nonlinearity),
// bit for bit, on the device's kernels: bf16, f16 and f32, affine or not, a strided view, rows longer
// than the CPU kernel's chunks. A silu taken before the norm's rounding to x's dtype (or a rounding
// skipped) fails here; the op table (op_cases.h) holds it to the f64 reference.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>

#include "core/random.h"
#include "expect_bits.h"
#include "ops/ops.h"

namespace diffq {
namespace {

TEST(GroupNormSilu, EqualsSiluOfGroupNormBitwise) {
  Generator g(11);
  for (DType dt : {DType::bf16, DType::f16, DType::f32})
    for (bool affine : {true, false})
      for (bool view : {false, true}) {
        // 70 x 70 pixels: rows of 4900, longer than the kernel's 4096-element chunks.
        Tensor x = ops::mul_scalar(randn_tensor({2, 16, 70, 70}, g, DType::f32), 4.0).to(dt);
        if (view) x = x.permute({0, 1, 3, 2});  // [2, 16, 70, 70] with swapped spatial strides
        const Tensor w = affine ? randn_tensor({16}, g, DType::f32).to(dt) : Tensor();
        const Tensor b = affine ? randn_tensor({16}, g, DType::f32).to(dt) : Tensor();
        const Tensor fused = ops::group_norm_silu(x, 4, w, b, 1e-6);
        const Tensor chain = ops::silu(ops::group_norm(x, 4, w, b, 1e-6));
        expect_bits_equal(fused, chain,
                          std::string(dtype_name(dt)) + (affine ? " affine" : "") + (view ? " view" : ""));
      }
}

TEST(ChannelNormSilu, EqualsSiluOfChannelNormBitwise) {
  Generator g(12);
  for (DType dt : {DType::bf16, DType::f16, DType::f32})
    for (bool weight : {true, false})
      for (bool view : {false, true}) {
        // [1, 16, 3, 40, 50]: 6000 pixels per image, several of the kernel's 1024-pixel blocks and a tail.
        Tensor x = ops::mul_scalar(randn_tensor({1, 16, 3, 40, 50}, g, DType::f32), 4.0).to(dt);
        if (view) x = x.transpose(3, 4);
        const Tensor w = weight ? randn_tensor({16}, g, DType::f32).to(dt) : Tensor();
        const Tensor fused = ops::channel_norm_silu(x, w, 4.0);
        const Tensor chain = ops::silu(ops::channel_norm(x, w, 4.0));
        expect_bits_equal(fused, chain,
                          std::string(dtype_name(dt)) + (weight ? " weight" : "") + (view ? " view" : ""));
      }
}

// A bf16 channel_norm rounds as Diffusers' op-by-op bf16: F.normalize(x.float()).to(bf16) * scale * gamma,
// each product rounded to bf16: equal, bit for bit, to that chain of diffq's own ops (the f32 normalisation
// by channel_norm with scale 1 and no weight, a cast, the bf16 scalar and broadcast products), also with
// the fused silu; 6000 pixels (several blocks and a tail) and a transposed view.
TEST(ChannelNorm, Bf16RoundsAsTorchsOpByOpChain) {
  Generator g(13);
  for (bool view : {false, true})
    for (bool silu : {false, true}) {
      Tensor x = ops::mul_scalar(randn_tensor({1, 16, 3, 40, 50}, g, DType::f32), 4.0).to(DType::bf16);
      if (view) x = x.transpose(3, 4);
      const Tensor w = randn_tensor({16}, g, DType::f32).to(DType::bf16);
      const double scale = std::sqrt(96.0);  // Wan's sqrt(C): not a power of two, so each rounding shows
      const Tensor got = silu ? ops::channel_norm_silu(x, w, scale) : ops::channel_norm(x, w, scale);
      Tensor chain = ops::channel_norm(x.to(DType::f32), Tensor(), 1.0).to(DType::bf16);
      chain = ops::mul(ops::mul_scalar(chain, scale), w.view({1, 16, 1, 1, 1}));
      if (silu) chain = ops::silu(chain);
      expect_bits_equal(got, chain, std::string(view ? "view" : "contiguous") + (silu ? " silu" : ""));
    }
}

}  // namespace
}  // namespace diffq
