// copy / cast / to_device on the CPU: any strided view into a fresh contiguous tensor (or, for compiled
// graphs, a view whose last stride is 1: a slice of a concat's buffer), converting dtype with torch's
// rounding. Fast paths for same-dtype rows and f32 <-> bf16/f16.
#include <cstring>

#include "backend/cpu/kernels.h"
#include "backend/cpu/strided.h"
#include "backend/cpu/threads.h"
#include "diffq/error.h"

namespace diffq::backend::cpu {

namespace {

void convert_row(const uint8_t* src, int64_t src_stride, DType st, uint8_t* dst, DType dt, int64_t n) {
  const size_t ses = dtype_size(st), des = dtype_size(dt);
  if (st == dt) {
    if (src_stride == 1) {
      std::memcpy(dst, src, size_t(n) * ses);
    } else {
      for (int64_t i = 0; i < n; ++i) std::memcpy(dst + i * des, src + i * src_stride * ses, ses);
    }
    return;
  }
  if (st == DType::f32 && (dt == DType::bf16 || dt == DType::f16)) {
    auto* d = reinterpret_cast<uint16_t*>(dst);
    for (int64_t i = 0; i < n; ++i) {
      float v;
      std::memcpy(&v, src + i * src_stride * 4, 4);
      d[i] = dt == DType::bf16 ? f32_to_bf16(v) : f32_to_f16(v);
    }
    return;
  }
  if ((st == DType::bf16 || st == DType::f16) && dt == DType::f32) {
    auto* d = reinterpret_cast<float*>(dst);
    for (int64_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, src + i * src_stride * 2, 2);
      d[i] = st == DType::bf16 ? bf16_to_f32(h) : f16_to_f32(h);
    }
    return;
  }
  // General path. Integer <-> integer must not round through float; everything else goes through
  // float32 as torch's casts between these types do (double is exact for every source value).
  for (int64_t i = 0; i < n; ++i) {
    const double v = load_as_double(src, st, i * src_stride);
    if (st == DType::i64 && (dt == DType::i32 || dt == DType::i8 || dt == DType::u8)) {
      int64_t x;
      std::memcpy(&x, src + i * src_stride * 8, 8);
      store_from_double(dst, dt, i, double(dt == DType::i32 ? int64_t(int32_t(x))
                                           : dt == DType::i8 ? int64_t(int8_t(x)) : int64_t(uint8_t(x))));
    } else if (st == DType::i64 && is_floating(dt)) {
      // torch rounds int64 -> float32 once (then to the narrower float): no detour through double.
      int64_t x;
      std::memcpy(&x, src + i * src_stride * 8, 8);
      store_from_double(dst, dt, i, double(float(x)));
    } else {
      store_from_double(dst, dt, i, v);
    }
  }
}

void copy_cast(const OpCall& c, Tensor& out) {
  const Tensor& x = c.inputs[0];
  const DType st = x.dtype(), dt = out.dtype();
  const auto* base = static_cast<const uint8_t*>(x.storage()->data());
  auto* dst = static_cast<uint8_t*>(out.data_ptr());
  const size_t ses = dtype_size(st), des = dtype_size(dt);
  const RowIterator rows(x.shape(), x.strides()), out_rows(out.shape(), out.strides());
  const bool contiguous = out.is_contiguous();
  check(contiguous || (out.shape() == x.shape() && (out_rows.row_stride() == 1 || out_rows.row_len() <= 1)), "copy",
        "output rows must be contiguous, got ", out.str());
  parallel_for(rows.num_rows(), std::max<int64_t>(1, 16384 / std::max<int64_t>(rows.row_len(), 1)),
               [&](int64_t b, int64_t e) {
                 for (int64_t r = b; r < e; ++r) {
                   const int64_t so = x.offset() + rows.row_offset(r);
                   convert_row(base + so * int64_t(ses), rows.row_stride(), st,
                               dst + (contiguous ? r * rows.row_len() : out_rows.row_offset(r)) * int64_t(des), dt,
                               rows.row_len());
                 }
               });
}

void to_device_cpu(const OpCall& c, Tensor& out) {
  // CPU -> CPU only; CUDA copies are registered by the CUDA backend under DeviceKind::cuda.
  check(c.inputs[0].device().is_cpu() && out.device().is_cpu(), "to_device",
        "CPU backend cannot copy ", c.inputs[0].device().str(), " -> ", out.device().str());
  copy_cast(c, out);
}

}  // namespace

void register_copy_kernels() {
  ops::register_kernel(OpKind::copy, DeviceKind::cpu, copy_cast);
  ops::register_kernel(OpKind::cast, DeviceKind::cpu, copy_cast);
  ops::register_kernel(OpKind::to_device, DeviceKind::cpu, to_device_cpu);
}

}  // namespace diffq::backend::cpu
