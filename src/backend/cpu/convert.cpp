// Row conversions between storage dtypes and f32 (the compute type of every float kernel), and the
// f32 staging buffers built on them. bf16 <-> f32 is vectorised with torch's round-to-nearest-even
// (NaN -> 0x7fc0); other dtypes go through the scalar conversions of dtype.h.
#include "backend/cpu/hwy_config.h"
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backend/cpu/convert.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <cstring>

#include "backend/cpu/common.h"
#include "backend/cpu/simd-inl.h"
#include "backend/cpu/strided.h"
#include "backend/cpu/threads.h"

HWY_BEFORE_NAMESPACE();
namespace diffq::backend::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void Bf16ToF32(const uint16_t* src, float* dst, int64_t n) { Bf16RowToF32(src, dst, n); }

void F32ToBf16(const float* src, uint16_t* dst, int64_t n) { F32RowToBf16(src, dst, n); }

}  // namespace HWY_NAMESPACE
}  // namespace diffq::backend::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace diffq::backend::cpu {

HWY_EXPORT(Bf16ToF32);
HWY_EXPORT(F32ToBf16);

void load_f32(const void* src, DType st, int64_t stride, float* dst, int64_t n) {
  if (n <= 0) return;
  if (st == DType::f32) {
    const float* s = static_cast<const float*>(src);
    if (stride == 1) {
      std::memcpy(dst, s, size_t(n) * 4);
    } else {
      for (int64_t i = 0; i < n; ++i) dst[i] = s[i * stride];
    }
    return;
  }
  if (st == DType::bf16) {
    const uint16_t* s = static_cast<const uint16_t*>(src);
    if (stride == 1) {
      HWY_DYNAMIC_DISPATCH(Bf16ToF32)(s, dst, n);
    } else {
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(s[i * stride]);
    }
    return;
  }
  if (st == DType::f16) {
    const uint16_t* s = static_cast<const uint16_t*>(src);
    for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(s[i * stride]);
    return;
  }
  for (int64_t i = 0; i < n; ++i) dst[i] = float(load_as_double(src, st, i * stride));
}

void store_f32(const float* src, void* dst, DType dt, int64_t n) {
  if (n <= 0) return;
  switch (dt) {
    case DType::f32: std::memcpy(dst, src, size_t(n) * 4); return;
    case DType::bf16: HWY_DYNAMIC_DISPATCH(F32ToBf16)(src, static_cast<uint16_t*>(dst), n); return;
    case DType::f16: {
      uint16_t* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = f32_to_f16(src[i]);
      return;
    }
    default:
      for (int64_t i = 0; i < n; ++i) store_from_double(dst, dt, i, double(src[i]));
  }
}

void gather_f32(const Tensor& t, float* dst) {
  const RowIterator rows(t.shape(), t.strides());
  const int64_t len = rows.row_len();
  parallel_for(rows.num_rows(), std::max<int64_t>(1, 32768 / std::max<int64_t>(len, 1)),
               [&](int64_t b, int64_t e) {
                 for (int64_t r = b; r < e; ++r)
                   load_f32(elem_ptr(t, t.offset() + rows.row_offset(r)), t.dtype(),
                            rows.row_stride(), dst + r * len, len);
               });
}

F32Input::F32Input(const Tensor& t) {
  if (t.dtype() == DType::f32 && t.is_contiguous()) {
    p_ = t.data<float>();
    return;
  }
  buf_ = alloc_f32(t.numel());
  gather_f32(t, buf_.get());
  p_ = buf_.get();
}

F32Output::F32Output(Tensor& out) : out_(out) {
  if (out.dtype() == DType::f32) {
    p_ = out.data<float>();
  } else {
    buf_ = alloc_f32(out.numel());
    p_ = buf_.get();
  }
}

void F32Output::commit() {
  if (!buf_) return;
  const int64_t n = out_.numel();
  const DType dt = out_.dtype();
  auto* dst = static_cast<uint8_t*>(out_.data_ptr());
  const int64_t es = int64_t(dtype_size(dt));
  constexpr int64_t kChunk = 16384;
  parallel_for((n + kChunk - 1) / kChunk, 4, [&](int64_t b, int64_t e) {
    for (int64_t c = b; c < e; ++c) {
      const int64_t s = c * kChunk, len = std::min(kChunk, n - s);
      store_f32(p_ + s, dst + s * es, dt, len);
    }
  });
}

void coalesce_dims(Shape& shape, std::vector<Shape>& strides) {
  Shape ns;
  std::vector<Shape> nst(strides.size());
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    bool merge = !ns.empty();
    for (size_t k = 0; merge && k < strides.size(); ++k)
      merge = nst[k].back() == strides[k][d] * shape[d];
    if (merge) {
      ns.back() *= shape[d];
      for (size_t k = 0; k < strides.size(); ++k) nst[k].back() = strides[k][d];
    } else {
      ns.push_back(shape[d]);
      for (size_t k = 0; k < strides.size(); ++k) nst[k].push_back(strides[k][d]);
    }
  }
  if (ns.empty()) {
    ns.push_back(1);
    for (auto& s : nst) s.push_back(1);
  }
  shape = std::move(ns);
  strides = std::move(nst);
}

void map_f32_chunk(const void* src, DType xt, int64_t stride, void* dst, DType ot, int64_t n,
                   const std::function<void(const float*, float*, int64_t)>& f) {
  float in_buf[kMapChunk], out_buf[kMapChunk];
  const float* in = static_cast<const float*>(src);
  if (xt != DType::f32 || stride != 1) {
    load_f32(src, xt, stride, in_buf, n);
    in = in_buf;
  }
  if (ot == DType::f32) {
    f(in, static_cast<float*>(dst), n);
  } else {
    f(in, out_buf, n);
    store_f32(out_buf, dst, ot, n);
  }
}

void map_f32(const Tensor& x, Tensor& out, const std::function<void(const float*, float*, int64_t)>& f) {
  const DType xt = x.dtype(), ot = out.dtype();
  for_each_map_chunk(x, out, [&](const uint8_t* src, int64_t stride, uint8_t* dst, int64_t n) {
    map_f32_chunk(src, xt, stride, dst, ot, n, f);
  });
}

void for_each_map_chunk(const Tensor& x, Tensor& out,
                        const std::function<void(const uint8_t*, int64_t, uint8_t*, int64_t)>& chunk) {
  Shape shape = x.shape();
  std::vector<Shape> st = {x.strides(), contiguous_strides(shape)};
  coalesce_dims(shape, st);
  const RowIterator rows(shape, st[0]);
  const int64_t len = rows.row_len(), per_row = (len + kMapChunk - 1) / kMapChunk;
  auto* dst = static_cast<uint8_t*>(out.data_ptr());
  const int64_t oes = int64_t(dtype_size(out.dtype())), xes = int64_t(dtype_size(x.dtype()));
  parallel_for(rows.num_rows() * per_row, 2, [&](int64_t b, int64_t e) {
    for (int64_t it = b; it < e; ++it) {
      const int64_t r = it / per_row, c0 = (it % per_row) * kMapChunk, n = std::min(kMapChunk, len - c0);
      const uint8_t* src = elem_ptr(x, x.offset() + rows.row_offset(r)) + c0 * rows.row_stride() * xes;
      chunk(src, rows.row_stride(), dst + (r * len + c0) * oes, n);
    }
  });
}

int64_t load_int(const void* base, DType t, int64_t i) {
  switch (t) {
    case DType::i64: return static_cast<const int64_t*>(base)[i];
    case DType::i32: return static_cast<const int32_t*>(base)[i];
    case DType::i8: return static_cast<const int8_t*>(base)[i];
    case DType::u8: return static_cast<const uint8_t*>(base)[i];
    case DType::boolean: return static_cast<const uint8_t*>(base)[i] != 0;
    default: return int64_t(load_as_double(base, t, i));
  }
}

void store_int(void* base, DType t, int64_t i, int64_t v) {
  switch (t) {
    case DType::i64: static_cast<int64_t*>(base)[i] = v; return;
    case DType::i32: static_cast<int32_t*>(base)[i] = int32_t(v); return;
    case DType::i8: static_cast<int8_t*>(base)[i] = int8_t(v); return;
    case DType::u8: static_cast<uint8_t*>(base)[i] = uint8_t(v); return;
    case DType::boolean: static_cast<uint8_t*>(base)[i] = v != 0; return;
    default: store_from_double(base, t, i, double(v));
  }
}

}  // namespace diffq::backend::cpu
#endif  // HWY_ONCE
