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
#include "backend/cpu/rope_row-inl.h"
#include "backend/cpu/strided.h"
#include "backend/cpu/threads.h"

HWY_BEFORE_NAMESPACE();
namespace diffq::backend::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Rows [r0, r1) of rope over rows of D of [B, S, H, D] (dtype xt, row r at element rows.row_offset(r) of x, r * D
// when contiguous; its position (r / H) % S) into the contiguous rows of y (dtype yt): RopeRow on the row widened to
// f32, rounded once to yt. One dispatch per chunk of rows, bf16 rows of unit stride converted in the target (FLUX's
// rows of 128, where a dispatched conversion per row costs about what the arithmetic does). buf: 2 D floats.
void RopeRows(const uint8_t* x, DType xt, const RowIterator& rows, bool contiguous, int64_t r0, int64_t r1, int64_t H,
              int64_t S, const float* cs, const float* sn, uint8_t* y, DType yt, float* buf) {
  const int64_t D = rows.row_len(), stride = rows.row_stride();
  const int64_t xes = int64_t(dtype_size(xt)), yes = int64_t(dtype_size(yt));
  float* const res = buf + D;
  for (int64_t r = r0; r < r1; ++r) {
    const float* v = RowAsF32(x + (contiguous ? r * D : rows.row_offset(r)) * xes, xt, stride, buf, D);
    const int64_t p = (r / H) % S;
    RopeRowTo(v, cs + p * D, sn + p * D, y + r * D * yes, yt, D, res);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace diffq::backend::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace diffq::backend::cpu {

HWY_EXPORT(RopeRow);
HWY_EXPORT(RopeRows);

void rope_row_f32(const float* x, const float* cs, const float* sn, float* y, int64_t n) {
  HWY_DYNAMIC_DISPATCH(RopeRow)(x, cs, sn, y, n);
}

namespace {

void rope_kernel(const OpCall& c, Tensor& out) {
  const Tensor& x = c.inputs[0];
  const F32Input cs(c.inputs[1]), sn(c.inputs[2]);
  const int64_t S = x.size(1), H = x.size(2), D = x.size(3);
  const RowIterator rows(x.shape(), x.strides());
  const auto* xb = static_cast<const uint8_t*>(x.data_ptr());
  auto* dst = static_cast<uint8_t*>(out.data_ptr());
  const bool contiguous = x.is_contiguous();
  parallel_for(rows.num_rows(), std::max<int64_t>(1, 8192 / D), [&](int64_t r0, int64_t r1) {
    auto buf = alloc_f32(2 * D);
    HWY_DYNAMIC_DISPATCH(RopeRows)(xb, x.dtype(), rows, contiguous, r0, r1, H, S, cs.data(), sn.data(), dst,
                                   out.dtype(), buf.get());
  });
}

}  // namespace

void register_rope_kernels() { ops::register_kernel(OpKind::rope, DeviceKind::cpu, rope_kernel); }

}  // namespace diffq::backend::cpu
#endif  // HWY_ONCE
