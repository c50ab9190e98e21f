// concat on CUDA: each input (any strided view, any dtype) is copied bit for bit into its slice of the
// contiguous output by one gather/scatter kernel over 1, 2, 4 or 8-byte elements. The reference the
// tests hold it to is the CPU backend's concat (exact).
#include <cstdint>

#include "backend/cuda/kernels.h"
#include "backend/cuda/runtime.h"
#include "backend/cuda/strided.cuh"
#include "diffq/error.h"

namespace diffq::backend::cuda {

namespace {

constexpr int kThreads = 256;

template <typename T>
__global__ void scatter_kernel(const T* src, StridedView sv, T* dst, StridedView dv, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    dst[dv.offset_of(i)] = src[sv.offset_of(i)];
}

template <typename T>
void launch(const Tensor& in, Tensor& dst_view, int idx) {
  const std::vector<StridedView> v = make_views(in.shape(), {&in, &dst_view}, "concat");
  const int64_t n = in.numel();
  scatter_kernel<T><<<grid_for(n, kThreads), kThreads, 0, current_stream()>>>(static_cast<const T*>(in.data_ptr()), v[0],
                                                         static_cast<T*>(dst_view.data_ptr()), v[1], n);
  check_cuda(cudaGetLastError(), "concat: kernel launch", idx);
}

void concat(const OpCall& c, Tensor& out) {
  const int64_t rank = out.dim();
  const int64_t dim = c.attrs.i0 < 0 ? c.attrs.i0 + rank : c.attrs.i0;
  const size_t es = dtype_size(out.dtype());
  check(es == 1 || es == 2 || es == 4 || es == 8, "concat", "cuda: element size ", es, " of ", out.str(),
        " is not supported");
  const int idx = out.device().index;
  DeviceGuard guard(idx);
  int64_t at = 0;
  for (const Tensor& in : c.inputs) {
    const int64_t len = in.size(dim);
    if (in.numel() > 0) {
      Tensor part = out.slice(dim, at, at + len);
      switch (es) {
        case 1: launch<uint8_t>(in, part, idx); break;
        case 2: launch<uint16_t>(in, part, idx); break;
        case 4: launch<uint32_t>(in, part, idx); break;
        default: launch<uint64_t>(in, part, idx); break;
      }
    }
    at += len;
  }
}

}  // namespace

void register_layout_kernels() { ops::register_kernel(OpKind::concat, DeviceKind::cuda, concat); }

}  // namespace diffq::backend::cuda
