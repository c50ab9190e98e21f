// Walking a strided view row by row: a "row" is the last dimension; rows are numbered in row-major
// order of the leading dimensions, matching the layout of a contiguous output.
#pragma once

#include <cstdint>
#include <vector>

#include "diffq/tensor.h"

namespace diffq::backend::cpu {

class RowIterator {
 public:
  RowIterator(const Shape& shape, const Shape& strides) : shape_(shape), strides_(strides) {
    if (shape_.empty()) {
      shape_ = {1};
      strides_ = {1};
    }
    row_len_ = shape_.back();
    row_stride_ = strides_.back();
    rows_ = 1;
    for (size_t i = 0; i + 1 < shape_.size(); ++i) rows_ *= shape_[i];
  }
  int64_t num_rows() const { return rows_; }
  int64_t row_len() const { return row_len_; }
  int64_t row_stride() const { return row_stride_; }
  // Element offset (relative to the view's offset) of the first element of row r.
  int64_t row_offset(int64_t r) const {
    int64_t off = 0;
    for (int64_t d = int64_t(shape_.size()) - 2; d >= 0; --d) {
      const int64_t i = r % shape_[d];
      r /= shape_[d];
      off += i * strides_[d];
    }
    return off;
  }

 private:
  Shape shape_, strides_;
  int64_t row_len_ = 0, row_stride_ = 0, rows_ = 0;
};

// Strides of `t` broadcast to `shape` (0 on broadcast dims), for elementwise kernels.
inline Shape broadcast_strides(const Tensor& t, const Shape& shape) {
  Shape st(shape.size(), 0);
  const size_t lead = shape.size() - size_t(t.dim());
  for (size_t i = lead; i < shape.size(); ++i)
    st[i] = t.shape()[i - lead] == 1 ? 0 : t.strides()[i - lead];
  return st;
}

}  // namespace diffq::backend::cpu
