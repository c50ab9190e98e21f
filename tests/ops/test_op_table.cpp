// Runs the op table (op_cases.h) on the CPU backend against the f64 reference.
#include <gtest/gtest.h>

#include "ops/op_cases.h"

using namespace diffq;

namespace {

class CpuOps : public ::testing::TestWithParam<optest::OpCase> {};

TEST_P(CpuOps, MatchesReference) { optest::run_op_case(GetParam(), Device::cpu()); }

INSTANTIATE_TEST_SUITE_P(Table, CpuOps, ::testing::ValuesIn(optest::all_op_cases()),
                         [](const ::testing::TestParamInfo<optest::OpCase>& info) {
                           return info.param.name;
                         });

// The harness itself must be able to fail: a wrong op against the reference of another is caught.
TEST(OpHarness, DetectsAWrongResult) {
  optest::OpCase c{"wrong", {optest::InputSpec{{5, 7}}}, nullptr, 1e-5};
  std::mt19937 rng(1);
  Tensor x = optest::make_input(c.inputs[0], rng, Device::cpu());
  reference::Array ref = reference::unary(ops::UnaryFn::tanh, reference::from_tensor(x));
  const optest::Comparison good = optest::compare(ops::unary(x, ops::UnaryFn::tanh), ref);
  const optest::Comparison bad = optest::compare(ops::unary(x, ops::UnaryFn::sigmoid), ref);
  EXPECT_LE(good.rel_err, 1e-5);
  EXPECT_GT(bad.rel_err, 1e-2);
}

TEST(OpHarness, ViewsHaveTheRequestedLayout) {
  std::mt19937 rng(2);
  using optest::View;
  auto mk = [&](View v) { return optest::make_input({{3, 4, 5}, DType::f32, v}, rng, Device::cpu()); };
  EXPECT_TRUE(mk(View::contiguous).is_contiguous());
  for (View v : {View::transposed, View::permuted, View::strided, View::expanded}) {
    Tensor t = mk(v);
    EXPECT_EQ(t.shape(), (Shape{3, 4, 5}));
    EXPECT_FALSE(t.is_contiguous());
  }
  EXPECT_EQ(mk(View::offset).offset(), 5);
}

}  // namespace
