// Bad inputs throw diffq::Error whose message names the op in brackets.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "diffq/error.h"
#include "ops/ops.h"

using namespace diffq;

namespace {

Tensor f32(const Shape& s) { return Tensor::zeros(s, DType::f32); }

void expect_error(const std::function<void()>& f, const std::string& op) {
  try {
    f();
    ADD_FAILURE() << "expected an error from [" << op << "]";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[" + op), std::string::npos) << e.what();
  }
}

TEST(OpErrors, BadShapesNameTheOp) {
  expect_error([] { ops::linear(f32({2, 3}), f32({4, 5})); }, "linear");
  expect_error([] { ops::linear(f32({2, 3}), f32({4, 3}), f32({5})); }, "linear");
  expect_error([] { ops::matmul(f32({2, 3}), f32({4, 5})); }, "matmul");
  expect_error([] { ops::matmul(f32({2, 2, 3}), f32({3, 3, 5})); }, "matmul");
  expect_error([] { ops::add(f32({2, 3}), f32({4})); }, "binary");
  expect_error([] { ops::softmax(f32({2, 3}), 2); }, "softmax");
  expect_error([] { ops::layer_norm(f32({2, 3}), f32({4}), {}, 1e-5); }, "layer_norm");
  expect_error([] { ops::rms_norm(f32({2, 3}), f32({2}), 1e-5); }, "rms_norm");
  expect_error([] { ops::group_norm(f32({2, 6, 3}), 4, {}, {}, 1e-5); }, "group_norm");
  expect_error([] { ops::rope(f32({1, 2, 3, 5}), f32({2, 5}), f32({2, 5})); }, "rope");
  expect_error([] { ops::rope(f32({1, 2, 3, 4}), f32({3, 4}), f32({3, 4})); }, "rope");
  expect_error([] { ops::sdpa(f32({1, 2, 3, 4}), f32({1, 2, 5, 8}), f32({1, 2, 5, 4})); }, "sdpa");
  expect_error([] { ops::sdpa(f32({2, 3, 4}), f32({2, 3, 4}), f32({2, 3, 4})); }, "sdpa");
  expect_error([] { ops::sdpa(f32({1, 2, 3, 4}), f32({1, 2, 5, 4}), f32({1, 2, 5, 4}), f32({3, 4})); },
               "sdpa");
  expect_error([] { ops::conv2d(f32({1, 3, 4, 4}), f32({2, 4, 3, 3}), {}, 1, {}); }, "conv2d");
  expect_error([] { ops::conv2d(f32({1, 3, 2, 2}), f32({2, 3, 3, 3}), {}, 1, {}); }, "conv2d");
  expect_error([] { ops::conv2d(f32({1, 3, 4, 4}), f32({2, 3, 3, 3}), {}, 0, {1, 1, 1, 1}); }, "conv2d");
  expect_error([] { ops::upsample_nearest2x(f32({3, 4, 4})); }, "upsample_nearest2x");
  expect_error([] { ops::concat({f32({2, 3}), f32({3, 3})}, 1); }, "concat");
  expect_error([] { ops::concat({f32({2, 3}), Tensor::zeros({2, 3}, DType::bf16)}, 0); }, "concat");
  expect_error([] { ops::embedding(f32({3}), f32({4, 2})); }, "embedding");
  expect_error([] { ops::reduce(f32({2, 3}), ops::ReduceFn::sum, {3}); }, "reduce");
  expect_error([] { ops::absmax_blocks(f32({2, 10}), 4); }, "absmax_blocks");
  expect_error([] { ops::unary(Tensor::zeros({3}, DType::i32), ops::UnaryFn::exp); }, "unary");
}

TEST(OpErrors, BadValuesNameTheOp) {
  Tensor ids = Tensor::from_vector({0, 4, 1}, {3}, DType::i64);
  expect_error([&] { ops::embedding(ids, f32({4, 2})); }, "embedding");
  Tensor neg = Tensor::from_vector({-1}, {1}, DType::i32);
  expect_error([&] { ops::embedding(neg, f32({4, 2})); }, "embedding");
  Tensor a = Tensor::from_vector({3, 4}, {2}, DType::i32), z = Tensor::from_vector({1, 0}, {2}, DType::i32);
  expect_error([&] { ops::div(a, z); }, "binary");
}

TEST(OpErrors, EmptyTensorsAreFine) {
  EXPECT_EQ(ops::add(f32({0, 3}), f32({3})).shape(), (Shape{0, 3}));
  EXPECT_EQ(ops::linear(f32({0, 3}), f32({4, 3})).shape(), (Shape{0, 4}));
  EXPECT_EQ(ops::sum(f32({0, 3}), {0}).to_f32_vector(), (std::vector<float>{0, 0, 0}));
}

}  // namespace
