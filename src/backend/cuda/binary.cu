// binary (add, sub, mul, div, maximum, minimum) on CUDA: numpy broadcasting over any strided views,
// inputs float32/float16/bfloat16 (mixed allowed), computed in f32 and rounded once to the output
// dtype (a's), as torch's CPU kernels do. The scalar reference the tests hold it to is the CPU backend
// (tests/cuda/test_cuda.cpp). maximum/minimum propagate NaN like torch.maximum/minimum.
#include <cstdint>

#include "backend/cuda/convert.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/runtime.h"
#include "backend/cuda/strided.cuh"
#include "diffq/error.h"

namespace diffq::backend::cuda {

namespace {

using ops::BinaryFn;

constexpr int kThreads = 256;

__device__ __forceinline__ float apply(BinaryFn fn, float a, float b) {
  switch (fn) {
    case BinaryFn::add: return __fadd_rn(a, b);
    case BinaryFn::sub: return __fsub_rn(a, b);
    case BinaryFn::mul: return __fmul_rn(a, b);
    case BinaryFn::div: return __fdiv_rn(a, b);
    case BinaryFn::maximum: return isnan(a) ? a : isnan(b) ? b : fmaxf(a, b);
    case BinaryFn::minimum: return isnan(a) ? a : isnan(b) ? b : fminf(a, b);
  }
  return 0.0f;
}

struct Operand {
  const void* data;
  StridedView view;
  DType dtype;
};

__global__ void binary_kernel(Operand a, Operand b, void* out, DType ot, BinaryFn fn, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float x = load_f32(a.data, a.dtype, a.view.offset_of(i));
    const float y = load_f32(b.data, b.dtype, b.view.offset_of(i));
    store_f32(out, ot, i, apply(fn, x, y));
  }
}

void binary(const OpCall& c, Tensor& out) {
  const Tensor &a = c.inputs[0], &b = c.inputs[1];
  const auto fn = static_cast<BinaryFn>(c.attrs.i0);
  check(c.attrs.i0 >= int64_t(BinaryFn::add) && c.attrs.i0 <= int64_t(BinaryFn::minimum), "binary",
        "unknown function ", c.attrs.i0);
  for (const Tensor* t : {&a, &b, static_cast<const Tensor*>(&out)})
    check(is_kernel_float(t->dtype()), "binary", "cuda: ", t->str(),
          " is not supported yet (float32, float16, bfloat16 are)");
  const std::vector<StridedView> v = make_views(out.shape(), {&a, &b}, "binary");
  const int idx = out.device().index;
  DeviceGuard guard(idx);
  const int64_t n = out.numel();
  binary_kernel<<<grid_for(n, kThreads), kThreads>>>(Operand{a.data_ptr(), v[0], a.dtype()},
                                                     Operand{b.data_ptr(), v[1], b.dtype()},
                                                     out.data_ptr(), out.dtype(), fn, n);
  check_cuda(cudaGetLastError(), "binary: kernel launch", idx);
}

}  // namespace

void register_binary_kernels() { ops::register_kernel(OpKind::binary, DeviceKind::cuda, binary); }

}  // namespace diffq::backend::cuda
