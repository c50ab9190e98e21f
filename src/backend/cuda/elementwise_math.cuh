// The float math of the elementwise ops on CUDA, one definition for the eager kernels (elementwise.cu,
// binary.cu) and compile's fused kernel (compile/fused_kernel.cu): f32 in, f32 out, the CPU backend's
// formulas (src/backend/cpu/elementwise.cpp, unary.cpp), so a fused program gives the eager ops' bits.
#pragma once

#include <cmath>

#include "ops/op.h"

namespace diffq::backend::cuda {

__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(fminf(-x, 88.0f))); }

__device__ __forceinline__ float apply_unary(ops::UnaryFn fn, float x) {
  switch (fn) {
    case ops::UnaryFn::silu: return x * sigmoid(x);
    case ops::UnaryFn::gelu_tanh: {
      const float inner = 0.7978845608028654f * (x + 0.044715f * x * x * x);
      return 0.5f * x * (1.0f + tanhf(inner));
    }
    case ops::UnaryFn::gelu_erf: return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
    case ops::UnaryFn::quick_gelu: return x * sigmoid(1.702f * x);
    case ops::UnaryFn::exp: return expf(x);
    case ops::UnaryFn::neg: return -x;
    case ops::UnaryFn::sqrt: return sqrtf(x);
    case ops::UnaryFn::rsqrt: return 1.0f / sqrtf(x);
    case ops::UnaryFn::tanh: return tanhf(x);
    case ops::UnaryFn::sigmoid: return sigmoid(x);
    case ops::UnaryFn::sin: return sinf(x);
    case ops::UnaryFn::cos: return cosf(x);
    case ops::UnaryFn::abs: return fabsf(x);
    case ops::UnaryFn::square: return x * x;
  }
  return 0.0f;
}

__device__ __forceinline__ float apply_scalar(ops::ScalarFn fn, float x, float s) {
  switch (fn) {
    case ops::ScalarFn::add: return __fadd_rn(x, s);
    case ops::ScalarFn::mul: return __fmul_rn(x, s);
    case ops::ScalarFn::rsub: return __fsub_rn(s, x);
    case ops::ScalarFn::pow:
      if (s == 2.0f) return __fmul_rn(x, x);
      if (s == 0.5f) return sqrtf(x);
      if (s == 1.0f) return x;
      return powf(x, s);
  }
  return 0.0f;
}

__device__ __forceinline__ float apply_binary(ops::BinaryFn fn, float a, float b) {
  switch (fn) {
    case ops::BinaryFn::add: return __fadd_rn(a, b);
    case ops::BinaryFn::sub: return __fsub_rn(a, b);
    case ops::BinaryFn::mul: return __fmul_rn(a, b);
    case ops::BinaryFn::div: return __fdiv_rn(a, b);
    case ops::BinaryFn::maximum: return isnan(a) ? a : isnan(b) ? b : fmaxf(a, b);
    case ops::BinaryFn::minimum: return isnan(a) ? a : isnan(b) ? b : fminf(a, b);
  }
  return 0.0f;
}

}  // namespace diffq::backend::cuda
