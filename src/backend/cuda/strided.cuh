// A strided tensor view as CUDA kernels read it, passed by value as a kernel argument: element offsets
// of a row-major linear index over a (common, broadcast) shape. Host helpers build the views and
// collapse dimensions that every view walks contiguously, so plain contiguous inputs cost one divide
// per element at most.
#pragma once

#include <cstdint>
#include <vector>

#include "diffq/error.h"
#include "diffq/tensor.h"

// offset_of is callable from the host too: tests/cuda/test_cuda_indexing.cpp checks the views the
// kernels walk against the tensors' own element offsets on a machine without a GPU.
#ifdef __CUDACC__
#define DIFFQ_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define DIFFQ_HOST_DEVICE inline
#endif

namespace diffq::backend::cuda {

inline constexpr int kMaxDims = 8;

struct StridedView {
  int rank = 0;
  int64_t shape[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};

  DIFFQ_HOST_DEVICE int64_t offset_of(int64_t linear) const {
    int64_t off = 0;
    for (int d = rank - 1; d > 0; --d) {
      const int64_t i = linear % shape[d];
      linear /= shape[d];
      off += i * strides[d];
    }
    return rank > 0 ? off + linear * strides[0] : 0;
  }
};

// Views of `tensors` broadcast to `shape` (stride 0 on broadcast dims), with mergeable dims merged.
inline std::vector<StridedView> make_views(const Shape& shape, const std::vector<const Tensor*>& tensors,
                                           const char* ctx) {
  const size_t rank = shape.size();
  std::vector<Shape> st(tensors.size(), Shape(rank, 0));
  for (size_t k = 0; k < tensors.size(); ++k) {
    const Tensor& t = *tensors[k];
    // Right-aligned as numpy broadcasting. A view with more dims than `shape` (a norm weight kept as
    // [1, 1, n] for a rank-1 walk) is read through its trailing dims; its extra leading dims must be
    // size 1 (they never move the offset). Without this, rank - dim wrapped around and such a view
    // read element 0 everywhere.
    const size_t dims = size_t(t.dim()), extra = dims > rank ? dims - rank : 0;
    for (size_t i = 0; i < extra; ++i)
      check(t.shape()[i] == 1, ctx, "cuda: ", t.str(), " has more dims than the ", rank,
            "-d shape ", shape_str(shape), " it is read as, and its extra leading dim ", i, " is ",
            t.shape()[i], ", not 1");
    const size_t lead = rank - (dims - extra);  // dims of `shape` the view lacks (broadcast)
    for (size_t i = lead; i < rank; ++i) {
      const size_t j = i - lead + extra;  // the view's own dim aligned with dim i
      check(t.shape()[j] == 1 || t.shape()[j] == shape[i], ctx, "cuda: ", t.str(), " does not broadcast to ",
            shape_str(shape));
      st[k][i] = t.shape()[j] == 1 ? 0 : t.strides()[j];
    }
  }
  // Merge dim i into dim i+1 (walking inner to outer) where every view steps evenly across both.
  Shape sh;
  std::vector<Shape> ss(tensors.size());
  for (size_t i = 0; i < rank; ++i) {
    if (shape[i] == 1 && rank > 1) continue;  // size-1 dims never move the offset
    bool merge = !sh.empty();
    for (size_t k = 0; merge && k < tensors.size(); ++k) merge = ss[k].back() == st[k][i] * shape[i];
    if (merge) {
      sh.back() *= shape[i];
      for (size_t k = 0; k < tensors.size(); ++k) ss[k].back() = st[k][i];
    } else {
      sh.push_back(shape[i]);
      for (size_t k = 0; k < tensors.size(); ++k) ss[k].push_back(st[k][i]);
    }
  }
  check(sh.size() <= size_t(kMaxDims), ctx, "cuda: views of rank ", sh.size(), " (after merging) exceed ",
        kMaxDims, " dims: ", shape_str(shape));
  std::vector<StridedView> out(tensors.size());
  for (size_t k = 0; k < tensors.size(); ++k) {
    out[k].rank = int(sh.size());
    for (size_t i = 0; i < sh.size(); ++i) {
      out[k].shape[i] = sh[i];
      out[k].strides[i] = ss[k][i];
    }
  }
  return out;
}

// Blocks for a grid-stride loop over n elements.
inline unsigned grid_for(int64_t n, int threads) {
  const int64_t blocks = (n + threads - 1) / threads;
  return unsigned(blocks < 65536 ? (blocks < 1 ? 1 : blocks) : 65536);
}

}  // namespace diffq::backend::cuda
