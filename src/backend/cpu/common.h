// Shared plumbing of the CPU kernels: dtype conversion of rows to/from f32 (SIMD, runtime dispatch,
// torch rounding), f32 staging buffers for inputs and outputs, and raw element addressing of views.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "diffq/tensor.h"

namespace diffq::backend::cpu {

// n elements of dtype `st` read every `stride` elements from `src` -> contiguous f32 `dst`.
void load_f32(const void* src, DType st, int64_t stride, float* dst, int64_t n);
// n contiguous f32 -> contiguous dtype `dt` at `dst`, rounding as torch's casts (integers truncate).
void store_f32(const float* src, void* dst, DType dt, int64_t n);

// Address of the element at `elem_offset` (in elements, from the storage start) of t's storage.
inline const uint8_t* elem_ptr(const Tensor& t, int64_t elem_offset) {
  return static_cast<const uint8_t*>(t.storage()->data()) + elem_offset * int64_t(dtype_size(t.dtype()));
}

// Elements [c0, c0 + n) of row `row_offset` (elements from t's storage start) at element stride s, as f32: a
// pointer into t where that already is f32 with s <= 1, else converted into buf (s == 0, a broadcast
// operand: its one element). The elementwise kernels' operand rows.
inline const float* f32_chunk(const Tensor& t, int64_t row_offset, int64_t c0, int64_t s, int64_t n, float* buf) {
  const uint8_t* p = elem_ptr(t, t.offset() + row_offset + c0 * s);
  if (t.dtype() == DType::f32 && s <= 1) return reinterpret_cast<const float*>(p);
  load_f32(p, t.dtype(), s, buf, s == 0 ? 1 : n);
  return buf;
}

// Uninitialised float array (kernels overwrite every element).
inline std::unique_ptr<float[]> alloc_f32(int64_t n) {
  return std::unique_ptr<float[]>(new float[size_t(n > 0 ? n : 1)]);
}

// Contiguous f32 values of any view: a pointer into t when it already is contiguous f32, else a
// converted copy (converted in parallel).
class F32Input {
 public:
  explicit F32Input(const Tensor& t);
  const float* data() const { return p_; }

 private:
  std::unique_ptr<float[]> buf_;
  const float* p_ = nullptr;
};

// Where a kernel writes f32 results for `out`: out's own memory when out is f32, else a staging
// buffer that commit() rounds into out (in parallel).
class F32Output {
 public:
  explicit F32Output(Tensor& out);
  float* data() { return p_; }
  void commit();

 private:
  Tensor& out_;
  std::unique_ptr<float[]> buf_;
  float* p_ = nullptr;
};

// Converts any view into contiguous f32 at dst (parallel over rows).
void gather_f32(const Tensor& t, float* dst);

// Merges adjacent dims that are laid out contiguously relative to each other in every operand
// (strides given per operand, all of `shape`'s rank); size-1 dims are dropped. Keeps rank >= 1.
void coalesce_dims(Shape& shape, std::vector<Shape>& strides);

// Elementwise map over f32 values: out[i] = f(x[i]) for any view x and a contiguous out (same
// shape), in chunks of at most kMapChunk elements, in parallel. f(src, dst, n) may alias src == dst.
inline constexpr int64_t kMapChunk = 4096;
void map_f32(const Tensor& x, Tensor& out, const std::function<void(const float*, float*, int64_t)>& f);
// map_f32's walk over x and out with another chunk step: chunk(src, stride, dst, n) for n <= kMapChunk
// elements of x at src (element stride `stride`, x's dtype) into out at dst (contiguous, out's dtype).
void for_each_map_chunk(const Tensor& x, Tensor& out,
                        const std::function<void(const uint8_t*, int64_t, uint8_t*, int64_t)>& chunk);
// One chunk of map_f32: n <= kMapChunk elements of src (dtype xt, element stride `stride`) widened to f32
// (read in place for unit-stride f32), f into dst (dtype ot, contiguous) rounded once. dst may be src
// where the layouts agree (an in-place row).
void map_f32_chunk(const void* src, DType xt, int64_t stride, void* dst, DType ot, int64_t n,
                   const std::function<void(const float*, float*, int64_t)>& f);

// Integer element access (exact for every integer dtype and boolean).
int64_t load_int(const void* base, DType t, int64_t i);
void store_int(void* base, DType t, int64_t i, int64_t v);  // wraps like a C cast; bool: v != 0
inline bool is_integer_like(DType t) { return !is_floating(t); }

}  // namespace diffq::backend::cpu
