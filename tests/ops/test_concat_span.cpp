// ops::concat of slices laid end to end in one storage (FLUX's single blocks join the previous block's text
// and image halves again) is the view of their span: the values of the copy, no new memory. Anything else
// (a gap, another order, another storage, a trace) runs the op.
#include <gtest/gtest.h>

#include "common/random_tensor.h"
#include "diffq/error.h"
#include "expect_bits.h"
#include "ops/ops.h"
#include "ops/trace.h"

namespace diffq {
namespace {

using testing::randn;

// The concat's values, computed by the kernel (a copy of each input first: never a span).
Tensor copied_concat(const std::vector<Tensor>& xs, int64_t dim) {
  std::vector<Tensor> c;
  for (const Tensor& x : xs) c.push_back(x.contiguous().to(Device::cpu()).clone());
  return ops::concat(c, dim);
}

TEST(ConcatSpan, AdjacentSlicesOfOneStorageAreAView) {
  const Tensor y = randn({2, 9, 6}, 1, DType::bf16);
  const Tensor a = y.slice(1, 0, 4), b = y.slice(1, 4, 7), c = y.slice(1, 7, 9);
  const Tensor joined = ops::concat({a, b, c}, 1);
  expect_bits_equal(joined, copied_concat({a, b, c}, 1), "three halves");
  EXPECT_EQ(joined.storage(), y.storage());
  EXPECT_EQ(joined.data_ptr(), y.data_ptr());
  // Along the last dim of a row-sliced view: still a span (rows of the view).
  const Tensor rows = y.slice(1, 2, 8);
  const Tensor j2 = ops::concat({rows.slice(2, 0, 2), rows.slice(2, 2, 6)}, -1);
  expect_bits_equal(j2, copied_concat({rows.slice(2, 0, 2), rows.slice(2, 2, 6)}, -1), "last dim");
  EXPECT_EQ(j2.data_ptr(), rows.data_ptr());
}

TEST(ConcatSpan, OtherwiseTheOpCopies) {
  const Tensor y = randn({2, 9, 6}, 1, DType::bf16), z = randn({2, 9, 6}, 2, DType::bf16);
  const std::vector<std::vector<Tensor>> cases = {
      {y.slice(1, 0, 3), y.slice(1, 4, 9)},   // a gap
      {y.slice(1, 4, 9), y.slice(1, 0, 4)},   // the other order
      {y.slice(1, 0, 4), z.slice(1, 4, 9)},   // another storage
      {y.slice(1, 0, 4), y.slice(1, 4, 9).slice(2, 0, 3)},  // other widths
  };
  for (size_t i = 0; i < 3; ++i) {
    const Tensor j = ops::concat(cases[i], 1);
    expect_bits_equal(j, copied_concat(cases[i], 1), "case " + std::to_string(i));
    EXPECT_NE(j.storage(), y.storage()) << i;
  }
  EXPECT_THROW(ops::concat(cases[3], 1), Error);
  // Shapes that do not join are still an error naming the op, even when the offsets line up.
  const Tensor flat = randn({24}, 3, DType::f32);
  EXPECT_THROW(ops::concat({flat.slice(0, 0, 12).view({2, 6}), flat.slice(0, 12, 24).view({3, 4})}, 0), Error);
}

TEST(ConcatSpan, ATraceRecordsTheOp) {
  ops::Trace trace;
  const Tensor y = trace.input({2, 9, 6}, DType::bf16);
  const Tensor j = ops::concat({y.slice(1, 0, 4), y.slice(1, 4, 9)}, 1);
  const ops::Graph g = trace.finish({j});
  ASSERT_EQ(g.nodes.size(), 1u);
  EXPECT_EQ(g.nodes[0].call.kind, ops::OpKind::concat);
}

}  // namespace
}  // namespace diffq
