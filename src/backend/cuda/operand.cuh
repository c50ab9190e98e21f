// An input tensor as the group_norm, channel_norm and absmax_blocks kernels read it: data pointer,
// strided view and dtype, passed by value. Built on the host either broadcast to a shape (the
// activation, walked in the output's row-major order) or flat (a parameter such as a norm weight, whose
// elements are read in its own row-major order whatever its shape: [C], [1, C, 1, 1] and [C, 1] all
// work, as on the CPU, which reads parameters as flat f32 arrays).
#pragma once

#include "backend/cuda/convert.cuh"
#include "backend/cuda/strided.cuh"
#include "diffq/error.h"
#include "ops/op.h"

namespace diffq::backend::cuda {

struct KernelInput {
  const void* data = nullptr;  // nullptr: an absent optional input
  StridedView view;
  DType dtype = DType::f32;

  __device__ __forceinline__ float f32_at(int64_t linear) const {
    return load_f32(data, dtype, view.offset_of(linear));
  }
};

// t (float32/float16/bfloat16) walked over `shape`; absent (data nullptr) when t is undefined.
inline KernelInput float_input(const Tensor& t, const Shape& shape, const char* ctx) {
  KernelInput in;
  if (!t.defined()) return in;
  check(is_kernel_float(t.dtype()), ctx, "cuda: ", t.str(), " is not supported (float32, float16, bfloat16 are)");
  in.data = t.data_ptr();
  in.view = make_views(shape, {&t}, ctx)[0];
  in.dtype = t.dtype();
  return in;
}

// t's elements in its own row-major order (linear index 0 .. numel - 1), whatever its shape.
inline KernelInput flat_float_input(const Tensor& t, const char* ctx) {
  return float_input(t, t.defined() ? t.shape() : Shape{}, ctx);
}

inline Tensor optional_input(const ops::OpCall& c, size_t i) {
  return c.inputs.size() > i ? c.inputs[i] : Tensor();
}

}  // namespace diffq::backend::cuda
