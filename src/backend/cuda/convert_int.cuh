// Integer and mixed element access for CUDA kernels, with the CPU's semantics (include/diffq/dtype.h
// load_as_double / store_from_double, src/backend/cpu/convert.cpp load_int / store_int):
// - load_i64 / store_i64: exact integer arithmetic's view of an element; a store wraps like a C cast,
//   a boolean stores v != 0;
// - load_as_f32 / store_from_f32: a float kernel reading or writing any supported dtype. Integers are
//   read through double (so an i64 rounds i64 -> f64 -> f32, as the CPU's load_f32), a float result is
//   stored to an integer dtype by truncation toward zero, saturating at the dtype's range, NaN -> 0
//   (the CPU's to_int), and to a boolean as v != 0.
// The float dtypes keep convert.cuh's bit-exact conversions.
#pragma once

#include <cstdint>

#include "backend/cuda/convert.cuh"
#include "diffq/dtype.h"

namespace diffq::backend::cuda {

// The integer dtypes the integer kernels take (boolean reads as 0/1).
__host__ __device__ inline bool is_kernel_int(DType t) {
  return t == DType::i8 || t == DType::u8 || t == DType::i32 || t == DType::i64 || t == DType::boolean;
}
// is_kernel_float (convert.cuh) for device code too.
__host__ __device__ inline bool is_f32_f16_bf16(DType t) {
  return t == DType::f32 || t == DType::f16 || t == DType::bf16;
}
// Every dtype a kernel built on load_as_f32 / store_from_f32 reads and writes (not the float8 types).
__host__ __device__ inline bool is_kernel_numeric(DType t) { return is_f32_f16_bf16(t) || is_kernel_int(t); }

__device__ __forceinline__ int64_t load_i64(const void* base, DType t, int64_t i) {
  switch (t) {
    case DType::i64: return static_cast<const int64_t*>(base)[i];
    case DType::i32: return static_cast<const int32_t*>(base)[i];
    case DType::i8: return static_cast<const int8_t*>(base)[i];
    case DType::u8: return static_cast<const uint8_t*>(base)[i];
    case DType::boolean: return static_cast<const uint8_t*>(base)[i] != 0;
    default: return int64_t(load_f32(base, t, i));  // not reached: the host checks is_kernel_int
  }
}

__device__ __forceinline__ void store_i64(void* base, DType t, int64_t i, int64_t v) {
  switch (t) {
    case DType::i64: static_cast<int64_t*>(base)[i] = v; return;
    case DType::i32: static_cast<int32_t*>(base)[i] = int32_t(v); return;
    case DType::i8: static_cast<int8_t*>(base)[i] = int8_t(v); return;
    case DType::u8: static_cast<uint8_t*>(base)[i] = uint8_t(v); return;
    case DType::boolean: static_cast<uint8_t*>(base)[i] = v != 0; return;
    default: return;  // not reached
  }
}

// double -> integer as the CPU's to_int<I>: NaN -> 0, saturate at [lo, hi], else truncate.
__device__ __forceinline__ int64_t saturate_to_int(double v, double lo, double hi, int64_t ilo, int64_t ihi) {
  if (isnan(v)) return 0;
  if (v <= lo) return ilo;
  if (v >= hi) return ihi;
  return int64_t(v);  // cvt.rzi: toward zero
}

// v rounded to dtype t as the CPU's store_from_double: float types via float(v), integers truncated
// with saturation, boolean v != 0 (NaN is true).
__device__ __forceinline__ void store_from_f64(void* base, DType t, int64_t i, double v) {
  switch (t) {
    case DType::f32:
    case DType::f16:
    case DType::bf16: store_f32(base, t, i, float(v)); return;
    case DType::i8: static_cast<int8_t*>(base)[i] = int8_t(saturate_to_int(v, -128.0, 127.0, -128, 127)); return;
    case DType::u8: static_cast<uint8_t*>(base)[i] = uint8_t(saturate_to_int(v, 0.0, 255.0, 0, 255)); return;
    case DType::i32:
      static_cast<int32_t*>(base)[i] =
          int32_t(saturate_to_int(v, -2147483648.0, 2147483647.0, INT32_MIN, INT32_MAX));
      return;
    case DType::i64:
      // double(INT64_MAX) is 2^63: v >= 2^63 saturates, as on the CPU.
      static_cast<int64_t*>(base)[i] = saturate_to_int(v, -9223372036854775808.0, 9223372036854775808.0,
                                                       INT64_MIN, INT64_MAX);
      return;
    case DType::boolean: static_cast<uint8_t*>(base)[i] = v != 0.0; return;
    default: return;  // not reached: the host checks is_kernel_numeric
  }
}

// Element i of any is_kernel_numeric dtype as double (exact for every integer dtype but i64 beyond 2^53).
__device__ __forceinline__ double load_as_f64(const void* base, DType t, int64_t i) {
  if (is_f32_f16_bf16(t)) return double(load_f32(base, t, i));
  return double(load_i64(base, t, i));
}

// Element i of any is_kernel_numeric dtype as f32 (integers via double, as the CPU's load_f32).
__device__ __forceinline__ float load_as_f32(const void* base, DType t, int64_t i) {
  if (is_f32_f16_bf16(t)) return load_f32(base, t, i);
  return float(double(load_i64(base, t, i)));
}

// An f32 result stored to any is_kernel_numeric dtype (the CPU's store_f32: integers via double).
__device__ __forceinline__ void store_from_f32(void* base, DType t, int64_t i, float v) {
  if (is_f32_f16_bf16(t)) store_f32(base, t, i, v);
  else store_from_f64(base, t, i, double(v));
}

}  // namespace diffq::backend::cuda
