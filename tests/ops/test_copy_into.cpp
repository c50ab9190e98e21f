// ops::copy_into: writes into a view of a preallocated tensor through the dispatcher (copy or cast).
#include <gtest/gtest.h>

#include "diffq/error.h"
#include "ops/ops.h"
#include "ops/trace.h"

using namespace diffq;

TEST(CopyInto, WritesASliceAndCasts) {
  Tensor dst = Tensor::zeros({2, 3, 4}, DType::f32);
  const Tensor src = Tensor::arange(12, DType::f32).view({3, 4}).slice(1, 1, 3);  // [3, 2], strided
  ops::copy_into(src, dst.select(0, 1).slice(1, 2, 4));                           // dst[1, :, 2:4]
  const auto v = dst.to_f32_vector();
  for (int64_t c = 0; c < 3; ++c)
    for (int64_t w = 0; w < 4; ++w) {
      EXPECT_EQ(v[size_t(c * 4 + w)], 0.f);  // dst[0] untouched
      EXPECT_EQ(v[size_t(12 + c * 4 + w)], w < 2 ? 0.f : float(c * 4 + (w - 2) + 1));
    }
  Tensor bf = Tensor::zeros({3, 2}, DType::bf16);
  ops::copy_into(Tensor::full({3, 2}, 1.00390625 + 1e-3, DType::f32), bf);  // rounds as torch's copy_
  EXPECT_EQ(bf.to_f32_vector()[0], 1.0078125f);
}

TEST(CopyInto, RejectsBadOutputs) {
  Tensor dst = Tensor::zeros({4, 6}, DType::f32);
  EXPECT_THROW(ops::copy_into(Tensor::zeros({4, 5}, DType::f32), dst), Error);                // shape
  EXPECT_THROW(ops::copy_into(Tensor::zeros({6, 4}, DType::f32), dst.transpose(0, 1)), Error);  // rows not contiguous
  ops::Trace trace;
  const Tensor x = trace.input({4, 6}, DType::f32);
  EXPECT_THROW(ops::copy_into(Tensor::zeros({4, 6}, DType::f32), dst), Error);  // not recordable
  (void)trace.finish({x});
}
