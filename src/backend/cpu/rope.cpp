// Rotary embedding on interleaved pairs (FLUX/Wan layout), in f32:
// out[2k] = x[2k] cos[2k] - x[2k+1] sin[2k], out[2k+1] = x[2k+1] cos[2k+1] + x[2k] sin[2k+1].
#include "backend/cpu/hwy_config.h"
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backend/cpu/rope.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "backend/cpu/common.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/row_kernels.h"
#include "backend/cpu/simd-inl.h"
#include "backend/cpu/strided.h"
#include "backend/cpu/threads.h"

HWY_BEFORE_NAMESPACE();
namespace diffq::backend::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void RopeRow(const float* x, const float* cs, const float* sn, float* y, int64_t n) {
#if HWY_TARGET == HWY_SCALAR  // one lane: no pair shuffles
  for (int64_t i = 0; i < n; i += 2) {
    const float a = x[i], b = x[i + 1];
    y[i] = a * cs[i] - b * sn[i];
    y[i + 1] = b * cs[i + 1] + a * sn[i + 1];
  }
#else
  const hn::ScalableTag<float> d;
  const int64_t N = int64_t(hn::Lanes(d));
  auto one = [&](int64_t i, size_t len) {
    const bool full = len == size_t(N);
    const auto v = full ? hn::LoadU(d, x + i) : LoadTail(d, x + i, len);
    const auto c = full ? hn::LoadU(d, cs + i) : LoadTail(d, cs + i, len);
    const auto s = full ? hn::LoadU(d, sn + i) : LoadTail(d, sn + i, len);
    const auto sw = hn::Shuffle2301(v);                 // (x1, x0, x3, x2, ...)
    const auto rot = hn::OddEven(sw, hn::Neg(sw));      // (-x1, x0, -x3, x2, ...)
    const auto r = hn::MulAdd(v, c, hn::Mul(rot, s));
    if (full) hn::StoreU(r, d, y + i);
    else StoreTail(r, d, y + i, len);
  };
  int64_t i = 0;
  for (; i + N <= n; i += N) one(i, size_t(N));
  if (i < n) one(i, size_t(n - i));
#endif
}

// Rows [r0, r1) of rope on bf16 rows of D at unit stride (row r at x + rows.row_offset(r), or r * D when
// contiguous; rows of [B, S, H, D]: position (r / H) % S) into bf16 rows of y: RopeRow on the widened row, rounded
// once (the generic path's bits), without its dispatches and conversions per row. buf: 2 D floats.
void RopeRowsBf16(const uint16_t* x, const RowIterator& rows, bool contiguous, int64_t r0, int64_t r1, int64_t H,
                  int64_t S, const float* cs, const float* sn, uint16_t* y, float* buf) {
  const hn::ScalableTag<float> d;
  const int64_t N = int64_t(hn::Lanes(d)), D = rows.row_len();
  float* const res = buf + D;
  for (int64_t r = r0; r < r1; ++r) {
    const uint16_t* src = x + (contiguous ? r * D : rows.row_offset(r));
    int64_t i = 0;
    for (; i + N <= D; i += N) hn::StoreU(LoadBf16(d, src + i), d, buf + i);
    for (; i < D; ++i) buf[i] = bf16_to_f32(src[i]);
    const int64_t p = (r / H) % S;
    RopeRow(buf, cs + p * D, sn + p * D, res, D);
    uint16_t* dst = y + r * D;
    for (i = 0; i + N <= D; i += N) StoreBf16(d, hn::LoadU(d, res + i), dst + i);
    for (; i < D; ++i) dst[i] = f32_to_bf16(res[i]);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace diffq::backend::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace diffq::backend::cpu {

HWY_EXPORT(RopeRow);
HWY_EXPORT(RopeRowsBf16);

void rope_row_f32(const float* x, const float* cs, const float* sn, float* y, int64_t n) {
  HWY_DYNAMIC_DISPATCH(RopeRow)(x, cs, sn, y, n);
}

namespace {

void rope_kernel(const OpCall& c, Tensor& out) {
  const Tensor& x = c.inputs[0];
  const F32Input cs(c.inputs[1]), sn(c.inputs[2]);
  const int64_t S = x.size(1), H = x.size(2), D = x.size(3);
  const RowIterator rows(x.shape(), x.strides());
  const DType ot = out.dtype();
  const int64_t oes = int64_t(dtype_size(ot));
  auto* dst = static_cast<uint8_t*>(out.data_ptr());
  const bool direct = x.dtype() == DType::f32 && rows.row_stride() == 1;
  if (x.dtype() == DType::bf16 && ot == DType::bf16 && rows.row_stride() == 1) {
    const auto* xb = static_cast<const uint16_t*>(x.data_ptr());
    const bool contiguous = x.is_contiguous();
    parallel_for(rows.num_rows(), std::max<int64_t>(1, 8192 / D), [&](int64_t r0, int64_t r1) {
      auto buf = alloc_f32(2 * D);
      HWY_DYNAMIC_DISPATCH(RopeRowsBf16)(xb, rows, contiguous, r0, r1, H, S, cs.data(), sn.data(),
                                         reinterpret_cast<uint16_t*>(dst), buf.get());
    });
    return;
  }
  parallel_for(rows.num_rows(), std::max<int64_t>(1, 8192 / D), [&](int64_t r0, int64_t r1) {
    auto in = alloc_f32(D), res = alloc_f32(D);
    for (int64_t r = r0; r < r1; ++r) {
      const uint8_t* src = elem_ptr(x, x.offset() + rows.row_offset(r));
      const float* v = reinterpret_cast<const float*>(src);
      if (!direct) {
        load_f32(src, x.dtype(), rows.row_stride(), in.get(), D);
        v = in.get();
      }
      const int64_t s = (r / H) % S;
      float* y = ot == DType::f32 ? reinterpret_cast<float*>(dst) + r * D : res.get();
      HWY_DYNAMIC_DISPATCH(RopeRow)(v, cs.data() + s * D, sn.data() + s * D, y, D);
      if (ot != DType::f32) store_f32(res.get(), dst + r * D * oes, ot, D);
    }
  });
}

}  // namespace

void register_rope_kernels() { ops::register_kernel(OpKind::rope, DeviceKind::cpu, rope_kernel); }

}  // namespace diffq::backend::cpu
#endif  // HWY_ONCE
