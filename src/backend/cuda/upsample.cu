// upsample_nearest2x on CUDA: x [N, C, H, W] (any strided view, any dtype) -> contiguous [N, C, 2H, 2W],
// every element copied bit for bit (so exact for every dtype, as the CPU's bytewise copy in
// src/backend/cpu/layout.cpp). One thread per output element; the source offset is
// upsample_source_offset (index_math.cuh), which tests/cuda/test_cuda_kernel_math.cpp runs on the host
// against the CPU backend.
#include "backend/channels_last.h"
#include <cstdint>

#include "backend/cuda/index_math.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/runtime.h"
#include "backend/cuda/strided.cuh"
#include "diffq/error.h"

namespace diffq::backend::cuda {

namespace {

constexpr int kThreads = 256;

template <class Bits>
__global__ void upsample_kernel(const Bits* x, Strides4 st, int64_t C, int64_t H, int64_t W, Bits* out,
                                int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    out[i] = x[upsample_source_offset(i, C, H, W, st)];
}

template <class Bits>
void launch(const Tensor& x, const Strides4& st, Tensor& out, int64_t n) {
  upsample_kernel<Bits><<<grid_for(n, kThreads), kThreads, 0, current_stream()>>>(static_cast<const Bits*>(x.data_ptr()), st,
                                                             x.size(1), x.size(2), x.size(3),
                                                             static_cast<Bits*>(out.data_ptr()), n);
}

void upsample_nearest2x(const OpCall& c, Tensor& out) {
  // channels-last: by way of channels-first copies (backend/channels_last.h)
  if (is_channels_last(c)) return run_channels_first(c, out, upsample_nearest2x);
  const Tensor& x = c.inputs[0];
  check(x.dim() == 4, "upsample_nearest2x", "cuda: expects [N, C, H, W], got ", x.str());
  const int64_t n = out.numel();
  if (n == 0) return;
  Strides4 st;
  for (int d = 0; d < 4; ++d) st.s[d] = x.strides()[size_t(d)];
  const int idx = out.device().index;
  DeviceGuard guard(idx);
  switch (dtype_size(x.dtype())) {
    case 1: launch<uint8_t>(x, st, out, n); break;
    case 2: launch<uint16_t>(x, st, out, n); break;
    case 4: launch<uint32_t>(x, st, out, n); break;
    case 8: launch<uint64_t>(x, st, out, n); break;
    default: fail("upsample_nearest2x", "cuda: no copy for elements of ", dtype_size(x.dtype()), " bytes");
  }
  check_cuda(cudaGetLastError(), "upsample_nearest2x: kernel launch", idx);
}

}  // namespace

void register_upsample_kernels() {
  ops::register_kernel(OpKind::upsample_nearest2x, DeviceKind::cuda, upsample_nearest2x);
}

}  // namespace diffq::backend::cuda
