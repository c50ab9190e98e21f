// rope, rms_norm and layer_norm on bf16 rows of unit stride (the CPU kernels' bf16 row paths, which skip the
// per-row dispatch and conversions): the bits of the same op on the exact f32 widening, rounded once to bf16
// (the generic path's arithmetic), for contiguous inputs and for views whose rows are not contiguous with each
// other (FLUX's per-head rows of 128, Wan's and the FFN widths; row lengths off the vector width).
#include <gtest/gtest.h>

#include <string>

#include "common/random_tensor.h"
#include "ops/ops.h"

using namespace diffq;
using diffq::testing::bits16;
using diffq::testing::randn;

namespace {

// x: the contiguous [2, S, H, D] bf16 tensor, and a view of the same shape whose rows are D apart but not
// contiguous with each other (a transposed [2, H, S, D] buffer).
std::vector<Tensor> inputs(int64_t S, int64_t H, int64_t D, uint32_t seed) {
  return {randn({2, S, H, D}, seed, DType::bf16), randn({2, H, S, D}, seed + 1, DType::bf16).transpose(1, 2)};
}

TEST(Bf16RowOps, RopeGivesTheF32PathsBits) {
  for (const int64_t D : {128, 34, 6}) {
    const int64_t S = 19, H = 3;
    const Tensor cs = randn({S, D}, 7, DType::f32), sn = randn({S, D}, 8, DType::f32);
    for (const Tensor& x : inputs(S, H, D, 10 + uint32_t(D))) {
      const Tensor got = ops::rope(x, cs, sn);
      ASSERT_EQ(got.dtype(), DType::bf16);
      EXPECT_EQ(bits16(got), bits16(ops::rope(x.to(DType::f32), cs, sn).to(DType::bf16)))
          << "D " << D << (x.is_contiguous() ? " contiguous" : " strided rows");
    }
  }
}

TEST(Bf16RowOps, NormsGiveTheF32PathsBits) {
  for (const int64_t D : {128, 67, 3072}) {
    const Tensor w = randn({D}, 20, DType::bf16), b = randn({D}, 21, DType::f32);
    for (const Tensor& x : inputs(5, 2, D, 30 + uint32_t(D))) {
      const Tensor xf = x.to(DType::f32);
      const std::string what = "D " + std::to_string(D) + (x.is_contiguous() ? " contiguous" : " strided rows");
      EXPECT_EQ(bits16(ops::rms_norm(x, w, 1e-6)), bits16(ops::rms_norm(xf, w, 1e-6).to(DType::bf16))) << what;
      EXPECT_EQ(bits16(ops::rms_norm(x, Tensor(), 1e-6)), bits16(ops::rms_norm(xf, Tensor(), 1e-6).to(DType::bf16)))
          << what;
      EXPECT_EQ(bits16(ops::layer_norm(x, w, b, 1e-6)), bits16(ops::layer_norm(xf, w, b, 1e-6).to(DType::bf16)))
          << what;
      EXPECT_EQ(bits16(ops::layer_norm(x, {}, {}, 1e-6)), bits16(ops::layer_norm(xf, {}, {}, 1e-6).to(DType::bf16)))
          << what;
    }
  }
}

}  // namespace
