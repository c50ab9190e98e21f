// The op profile's flop counts (DIFFQ_PROFILE_OPS=shapes): 2 M N K for a linear, 2 B H Sq Sk (D + Dv)
// for attention, 0 where not counted; and the shapes key.
#include <gtest/gtest.h>

#include "diffq/runtime.h"
#include "ops/op_profile.h"

using namespace diffq;

TEST(OpProfile, FlopsOfLinearAndAttention) {
  ops::OpCall lin{ops::OpKind::linear,
                  {Tensor::zeros({2, 5, 8}, DType::f32), Tensor::zeros({3, 8}, DType::f32), Tensor::zeros({3}, DType::f32)},
                  {}};
  EXPECT_DOUBLE_EQ(ops::op_profile_flops(lin), 2.0 * 10 * 3 * 8);
  EXPECT_EQ(ops::op_profile_shapes_of(lin), "[2, 5, 8] [3, 8] [3]");
  ops::OpCall att{ops::OpKind::sdpa,
                  {Tensor::zeros({1, 2, 6, 4}, DType::f32), Tensor::zeros({1, 2, 7, 4}, DType::f32),
                   Tensor::zeros({1, 2, 7, 5}, DType::f32), Tensor()},
                  {}};
  EXPECT_DOUBLE_EQ(ops::op_profile_flops(att), 2.0 * 1 * 2 * 6 * 7 * (4 + 5));
  EXPECT_EQ(ops::op_profile_shapes_of(att), "[1, 2, 6, 4] [1, 2, 7, 4] [1, 2, 7, 5] -");
  ops::OpCall add{ops::OpKind::binary, {Tensor::zeros({4}, DType::f32), Tensor::zeros({4}, DType::f32)}, {}};
  EXPECT_DOUBLE_EQ(ops::op_profile_flops(add), 0.0);
}

TEST(OpProfile, ResetForgetsTheCallsRecordedSoFar) {
  ops::op_profile_record(ops::OpKind::binary, DType::f32, "", 0.0, 1e-6);
  ops::op_profile_record(ops::OpKind::linear, DType::bf16, "[2, 8] [3, 8]", 96.0, 2e-6);
  EXPECT_GE(ops::op_profile_calls(), 2);
  reset_op_profile();
  EXPECT_EQ(ops::op_profile_calls(), 0);
  ops::op_profile_record(ops::OpKind::binary, DType::f32, "", 0.0, 1e-6);
  EXPECT_EQ(ops::op_profile_calls(), 1);
  reset_op_profile();  // (nothing printed at exit for this test binary)
}
