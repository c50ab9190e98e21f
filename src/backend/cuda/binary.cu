// binary (add, sub, mul, div, maximum, minimum) and mul_add on CUDA: numpy broadcasting over any strided views,
// inputs float32/float16/bfloat16 (mixed allowed), computed in f32 and rounded once to the output
// dtype (a's), as torch's CPU kernels do. The scalar reference the tests hold it to is the CPU backend
// (tests/cuda/test_cuda.cpp). maximum/minimum propagate NaN like torch.maximum/minimum.
// Integer inputs (int8, uint8, int32, int64, bool) as the CPU backend (src/backend/cpu/elementwise.cpp):
// both integer -> exact int64 arithmetic that wraps, division truncating toward zero, stored wrapping
// into a's dtype; division by zero is an error (flagged by the kernel, read back after it). One integer
// and one float input -> the float path, the integer read through double, and an integer output
// truncated with saturation (convert_int.cuh).
#include <cstdint>

#include "backend/cuda/convert.cuh"
#include "backend/cuda/convert_int.cuh"
#include "backend/cuda/elementwise_math.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/runtime.h"
#include "backend/cuda/strided.cuh"
#include "diffq/error.h"

namespace diffq::backend::cuda {

namespace {

using ops::BinaryFn;

constexpr int kThreads = 256;

struct Operand {
  const void* data;
  StridedView view;
  DType dtype;
};

// kMixed: some operand or the output is an integer dtype (a few more branches per element).
template <bool kMixed>
__global__ void binary_kernel(Operand a, Operand b, void* out, DType ot, BinaryFn fn, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    if constexpr (kMixed) {
      const float x = load_as_f32(a.data, a.dtype, a.view.offset_of(i));
      const float y = load_as_f32(b.data, b.dtype, b.view.offset_of(i));
      store_from_f32(out, ot, i, apply_binary(fn, x, y));
    } else {
      const float x = load_f32(a.data, a.dtype, a.view.offset_of(i));
      const float y = load_f32(b.data, b.dtype, b.view.offset_of(i));
      store_f32(out, ot, i, apply_binary(fn, x, y));
    }
  }
}

// The CPU's int_binary: wrapping add/sub/mul (through uint64), division toward zero with b == -1 as a
// wrapping negation (INT64_MIN / -1 would trap), b == 0 flagged and stored as 0.
__device__ __forceinline__ int64_t apply_int(BinaryFn fn, int64_t a, int64_t b, int* div_by_zero) {
  switch (fn) {
    case BinaryFn::add: return int64_t(uint64_t(a) + uint64_t(b));
    case BinaryFn::sub: return int64_t(uint64_t(a) - uint64_t(b));
    case BinaryFn::mul: return int64_t(uint64_t(a) * uint64_t(b));
    case BinaryFn::div:
      if (b == 0) {
        *div_by_zero = 1;
        return 0;
      }
      if (b == -1) return int64_t(0 - uint64_t(a));
      return a / b;
    case BinaryFn::maximum: return a > b ? a : b;
    case BinaryFn::minimum: return a < b ? a : b;
  }
  return 0;
}

__global__ void binary_int_kernel(Operand a, Operand b, void* out, DType ot, BinaryFn fn, int64_t n,
                                  int* div_by_zero) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t x = load_i64(a.data, a.dtype, a.view.offset_of(i));
    const int64_t y = load_i64(b.data, b.dtype, b.view.offset_of(i));
    store_i64(out, ot, i, apply_int(fn, x, y, div_by_zero));
  }
}

void binary(const OpCall& c, Tensor& out) {
  const Tensor &a = c.inputs[0], &b = c.inputs[1];
  const auto fn = static_cast<BinaryFn>(c.attrs.i0);
  check(c.attrs.i0 >= int64_t(BinaryFn::add) && c.attrs.i0 <= int64_t(BinaryFn::minimum), "binary",
        "unknown function ", c.attrs.i0);
  for (const Tensor* t : {&a, &b, static_cast<const Tensor*>(&out)})
    check(is_kernel_numeric(t->dtype()), "binary", "cuda: ", t->str(),
          " is not supported (float32, float16, bfloat16, int8, uint8, int32, int64, bool are)");
  const int64_t n = out.numel();
  if (n == 0) return;
  const std::vector<StridedView> v = make_views(out.shape(), {&a, &b}, "binary");
  const int idx = out.device().index;
  DeviceGuard guard(idx);
  const Operand oa{a.data_ptr(), v[0], a.dtype()}, ob{b.data_ptr(), v[1], b.dtype()};
  const unsigned grid = grid_for(n, kThreads);
  if (is_kernel_int(a.dtype()) && is_kernel_int(b.dtype())) {
    // div's division-by-zero flag: an int in device memory, read back after the kernel (a synchronising
    // copy, for integer div only; the other functions never touch it).
    Tensor flag;
    int* dz = nullptr;
    if (fn == BinaryFn::div) {
      refuse_in_capture("binary: integer division's division-by-zero check");
      flag = Tensor::empty({1}, DType::i32, out.device());
      dz = static_cast<int*>(flag.data_ptr());
      check_cuda(cudaMemsetAsync(dz, 0, sizeof(int), current_stream()), "binary: cudaMemset", idx);
    }
    binary_int_kernel<<<grid, kThreads, 0, current_stream()>>>(oa, ob, out.data_ptr(), out.dtype(), fn, n, dz);
    check_cuda(cudaGetLastError(), "binary: kernel launch", idx);
    if (fn == BinaryFn::div) {
      int hit = 0;
      check_cuda(cudaMemcpy(&hit, dz, sizeof hit, cudaMemcpyDeviceToHost), "binary: reading the division check", idx);
      check(hit == 0, "binary", "cuda: integer division by zero (", a.str(), " / ", b.str(), ") on ",
            out.device().str());
    }
    return;
  }
  if (is_kernel_float(a.dtype()) && is_kernel_float(b.dtype()) && is_kernel_float(out.dtype()))
    binary_kernel<false><<<grid, kThreads, 0, current_stream()>>>(oa, ob, out.data_ptr(), out.dtype(), fn, n);
  else
    binary_kernel<true><<<grid, kThreads, 0, current_stream()>>>(oa, ob, out.data_ptr(), out.dtype(), fn, n);
  check_cuda(cudaGetLastError(), "binary: kernel launch", idx);
}

// mul_add (ops/op.h): y = a * b + c over float operands, the product rounded to f32 (and to y's dtype when
// round_product), the sum rounded to y's dtype; __fmul_rn / __fadd_rn keep nvcc from contracting the two
// into an FMA, as the CPU kernel is built without contraction.
__global__ void mul_add_kernel(Operand a, Operand b, Operand c, void* out, DType ot, bool round_product, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    float p = __fmul_rn(load_f32(a.data, a.dtype, a.view.offset_of(i)), load_f32(b.data, b.dtype, b.view.offset_of(i)));
    if (round_product && ot == DType::bf16) p = bf16_bits_to_f32(f32_to_bf16_bits(p));
    if (round_product && ot == DType::f16) p = f16_bits_to_f32(f32_to_f16_bits(p));
    store_f32(out, ot, i, __fadd_rn(p, load_f32(c.data, c.dtype, c.view.offset_of(i))));
  }
}

void mul_add(const OpCall& call, Tensor& out) {
  const Tensor &a = call.inputs[0], &b = call.inputs[1], &c = call.inputs[2];
  for (const Tensor* t : {&a, &b, &c, static_cast<const Tensor*>(&out)})
    check(is_kernel_float(t->dtype()), "mul_add", "cuda: ", t->str(), " is not supported (float32, float16, bfloat16 are)");
  const int64_t n = out.numel();
  if (n == 0) return;
  const std::vector<StridedView> v = make_views(out.shape(), {&a, &b, &c}, "mul_add");
  const int idx = out.device().index;
  DeviceGuard guard(idx);
  const Operand oa{a.data_ptr(), v[0], a.dtype()}, ob{b.data_ptr(), v[1], b.dtype()}, oc{c.data_ptr(), v[2], c.dtype()};
  mul_add_kernel<<<grid_for(n, kThreads), kThreads, 0, current_stream()>>>(oa, ob, oc, out.data_ptr(), out.dtype(),
                                                                           call.attrs.flag, n);
  check_cuda(cudaGetLastError(), "mul_add: kernel launch", idx);
}

}  // namespace

void register_binary_kernels() {
  ops::register_kernel(OpKind::binary, DeviceKind::cuda, binary);
  ops::register_kernel(OpKind::mul_add, DeviceKind::cuda, mul_add);
}

}  // namespace diffq::backend::cuda
