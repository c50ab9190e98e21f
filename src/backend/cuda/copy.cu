// copy / cast / to_device on CUDA. Strided views are gathered by a kernel into a fresh contiguous
// tensor; whole contiguous buffers move with one cudaMemcpy. Casts between f32/f16/bf16 round bit-exactly
// as the CPU (convert.cuh); casts with the integer dtypes and boolean follow the CPU's convert_row
// (src/backend/cpu/copy.cpp, convert_int.cuh): int64 -> narrower integers wrap, int64 -> a float rounds
// once to f32, everything else goes through double (floats to integers truncate and saturate, NaN -> 0).
// A same-dtype copy moves raw element bits, so it is exact for every dtype (the float8 types too).
#include <cstdint>

#include "backend/cuda/convert.cuh"
#include "backend/cuda/convert_int.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/runtime.h"
#include "backend/cuda/strided.cuh"
#include "diffq/error.h"

namespace diffq::backend::cuda {

namespace {

constexpr int kThreads = 256;

// src view v -> dst view w (the output may be a view too: ops::copy_into writes a frame range of a
// preallocated video, execute_into's strided outputs).
template <class Bits>
__global__ void gather_kernel(const Bits* src, StridedView v, Bits* dst, StridedView w, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    dst[w.offset_of(i)] = src[v.offset_of(i)];
}

__global__ void cast_kernel(const void* src, StridedView v, DType st, void* dst, StridedView w, DType dt,
                            int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    store_f32(dst, dt, w.offset_of(i), load_f32(src, st, v.offset_of(i)));
}

// Casts with an integer or boolean end, element by element as the CPU's general convert_row path.
__global__ void cast_numeric_kernel(const void* src, StridedView v, DType st, void* dst, StridedView w, DType dt,
                                    int64_t n) {
  const bool wrap = st == DType::i64 && (dt == DType::i32 || dt == DType::i8 || dt == DType::u8);
  const bool i64_to_float = st == DType::i64 && is_f32_f16_bf16(dt);
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t so = v.offset_of(i), d = w.offset_of(i);
    if (wrap) store_i64(dst, dt, d, load_i64(src, st, so));
    else if (i64_to_float) store_f32(dst, dt, d, float(load_i64(src, st, so)));
    else store_from_f64(dst, dt, d, load_as_f64(src, st, so));
  }
}

template <class Bits>
void launch_gather(const Tensor& x, const StridedView& v, Tensor& out, const StridedView& w, int64_t n) {
  gather_kernel<Bits><<<grid_for(n, kThreads), kThreads, 0, current_stream()>>>(static_cast<const Bits*>(x.data_ptr()), v,
                                                           static_cast<Bits*>(out.data_ptr()), w, n);
}

// x (any view on out's device) -> out (any view of the same shape), converting dtype. The caller holds
// a DeviceGuard for out's device.
void copy_into(const Tensor& x, Tensor& out, const char* ctx) {
  const int idx = out.device().index;
  const int64_t n = out.numel();
  if (n == 0) return;
  const DType st = x.dtype(), dt = out.dtype();
  if (st == dt && x.is_contiguous() && out.is_contiguous()) {
    check_cuda(cudaMemcpyAsync(out.data_ptr(), x.data_ptr(), out.nbytes(), cudaMemcpyDeviceToDevice, current_stream()),
               cat(ctx, ": cudaMemcpy device->device of ", out.nbytes(), " bytes"), idx);
    return;
  }
  const Tensor* views[] = {&x, &out};
  const std::vector<StridedView> vw = make_views(x.shape(), {views[0], views[1]}, ctx);
  const StridedView &v = vw[0], &w = vw[1];
  if (st == dt) {
    switch (dtype_size(st)) {
      case 1: launch_gather<uint8_t>(x, v, out, w, n); break;
      case 2: launch_gather<uint16_t>(x, v, out, w, n); break;
      case 4: launch_gather<uint32_t>(x, v, out, w, n); break;
      case 8: launch_gather<uint64_t>(x, v, out, w, n); break;
      default: fail(ctx, "cuda: no copy for elements of ", dtype_size(st), " bytes");
    }
  } else if (is_kernel_float(st) && is_kernel_float(dt)) {
    cast_kernel<<<grid_for(n, kThreads), kThreads, 0, current_stream()>>>(x.data_ptr(), v, st, out.data_ptr(), w, dt, n);
  } else {
    check(is_kernel_numeric(st) && is_kernel_numeric(dt), ctx, "cuda: cast ", dtype_name(st), " -> ",
          dtype_name(dt), " is not implemented yet (float32, float16, bfloat16, the integer dtypes and boolean are)");
    cast_numeric_kernel<<<grid_for(n, kThreads), kThreads, 0, current_stream()>>>(x.data_ptr(), v, st, out.data_ptr(), w, dt, n);
  }
  check_cuda(cudaGetLastError(), cat(ctx, ": kernel launch"), idx);
}

// `x` itself when contiguous, else a contiguous copy on its own (CUDA) device.
Tensor contiguous_on_device(const Tensor& x, const char* ctx) {
  if (x.is_contiguous()) return x;
  Tensor c = Tensor::empty(x.shape(), x.dtype(), x.device());
  copy_into(x, c, ctx);
  return c;
}

void copy_cast(const OpCall& c, Tensor& out) {
  const Tensor& x = c.inputs[0];
  const char* ctx = ops::op_name(c.kind).data();
  check(x.device() == out.device() && out.device().is_cuda(), ctx, "cuda: expected input and output on ",
        out.device().str(), ", got ", x.device().str());
  DeviceGuard guard(out.device().index);
  copy_into(x, out, ctx);
}

void to_device(const OpCall& c, Tensor& out) {
  const Tensor& x = c.inputs[0];
  const Device from = x.device(), to = out.device();
  const size_t nbytes = out.nbytes();
  if (from != to && !(from.is_cuda() && to.is_cuda() && from.index == to.index))
    refuse_in_capture(cat("to_device ", from.str(), " -> ", to.str()));
  if (from.is_cpu() && to.is_cuda()) {
    // A strided host view is packed on the CPU first (the CPU copy kernel), then sent in one piece.
    const Tensor src = x.is_contiguous() ? x : ops::execute(OpCall{OpKind::copy, {x}, {}});
    DeviceGuard guard(to.index);
    check_cuda(cudaMemcpy(out.data_ptr(), src.data_ptr(), nbytes, cudaMemcpyHostToDevice),
               cat("to_device: cudaMemcpy host->device of ", nbytes, " bytes"), to.index);
  } else if (from.is_cuda() && to.is_cpu()) {
    DeviceGuard guard(from.index);
    const Tensor src = contiguous_on_device(x, "to_device");
    check_cuda(cudaMemcpy(out.data_ptr(), src.data_ptr(), nbytes, cudaMemcpyDeviceToHost),
               cat("to_device: cudaMemcpy device->host of ", nbytes, " bytes"), from.index);
  } else if (from.is_cuda() && to.is_cuda() && from.index == to.index) {
    DeviceGuard guard(to.index);
    copy_into(x, out, "to_device");
  } else if (from.is_cuda() && to.is_cuda()) {
    DeviceGuard guard(from.index);
    const Tensor src = contiguous_on_device(x, "to_device");
    check_cuda(cudaMemcpyPeer(out.data_ptr(), to.index, src.data_ptr(), from.index, nbytes),
               cat("to_device: cudaMemcpyPeer to ", to.str(), " of ", nbytes, " bytes"), from.index);
  } else {
    fail("to_device", "CUDA backend cannot copy ", from.str(), " -> ", to.str());
  }
}

}  // namespace

void register_copy_kernels() {
  ops::register_kernel(OpKind::copy, DeviceKind::cuda, copy_cast);
  ops::register_kernel(OpKind::cast, DeviceKind::cuda, copy_cast);
  ops::register_kernel(OpKind::to_device, DeviceKind::cuda, to_device);
}

}  // namespace diffq::backend::cuda
