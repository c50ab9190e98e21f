// Scalar f64 reference implementations of every op, on plain contiguous row-major arrays. They are
// the oracle of the op tests (tests/ops) for every backend: simple loops that follow the definitions
// in ops/ops.h literally, with no tiling, no SIMD and no shortcuts. Results are exact f64 values; the
// caller rounds them to the op's output dtype when comparing.
#pragma once

#include <vector>

#include "diffq/tensor.h"
#include "ops/op.h"

namespace diffq::reference {

struct Array {
  Shape shape;
  std::vector<double> v;  // row-major, numel(shape) values
  bool defined = false;
};

// Values of any CPU tensor view (any dtype) as f64; an undefined tensor gives an undefined Array.
Array from_tensor(const Tensor& t);
// Rounds every value as storing it into dtype `dt` would (f32/bf16/f16 rounding, integer truncation).
void round_to(Array& a, DType dt);

// Runs `call` (inputs on the CPU) in f64. The output shape is the op's inferred shape.
Array run(const ops::OpCall& call);

// ---- the ops (shapes as in ops/ops.h) ----
Array linear(const Array& x, const Array& w, const Array& b);
Array matmul(const Array& a, const Array& b);
Array binary(ops::BinaryFn fn, const Array& a, const Array& b, bool integer);
Array scalar(ops::ScalarFn fn, const Array& x, double s);
Array clamp(const Array& x, double lo, double hi);
Array unary(ops::UnaryFn fn, const Array& x);
Array softmax(const Array& x, int64_t dim);
Array layer_norm(const Array& x, const Array& w, const Array& b, double eps);
Array rms_norm(const Array& x, const Array& w, double eps);
Array group_norm(const Array& x, int64_t groups, const Array& w, const Array& b, double eps);
Array rope(const Array& x, const Array& cos, const Array& sin);
Array sdpa(const Array& q, const Array& k, const Array& v, const Array& mask, bool bool_mask,
           double scale);
Array conv2d(const Array& x, const Array& w, const Array& b, int64_t stride, int64_t pad_left,
             int64_t pad_right, int64_t pad_top, int64_t pad_bottom);
Array upsample_nearest2x(const Array& x);
Array concat(const std::vector<Array>& xs, int64_t dim);
Array embedding(const Array& ids, const Array& table);
Array reduce(ops::ReduceFn fn, const Array& x, const std::vector<int64_t>& dims, bool keepdim);
Array absmax_blocks(const Array& x, int64_t block);

}  // namespace diffq::reference
