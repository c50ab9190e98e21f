// softmax over any dim, in f32 (max-subtracted exp, one rounding to the output dtype).
#include "backend/cpu/hwy_config.h"
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backend/cpu/softmax.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>

#include <cmath>

#include "backend/cpu/common.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/simd-inl.h"
#include "backend/cpu/strided.h"
#include "backend/cpu/threads.h"

HWY_BEFORE_NAMESPACE();
namespace diffq::backend::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// y = softmax(x) over n contiguous floats; x may equal y.
void SoftmaxRow(const float* x, float* y, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t N = int64_t(hn::Lanes(d));
  auto vmax = hn::Set(d, -INFINITY);
  int64_t i = 0;
  for (; i + N <= n; i += N) vmax = hn::Max(vmax, hn::LoadU(d, x + i));
  float m = MaxLanes(d, vmax);
  for (; i < n; ++i) m = std::max(m, x[i]);
  if (m == -INFINITY) m = 0.f;  // all -inf: exp gives 0s and the division NaNs, as torch
  const auto vm = hn::Set(d, m);
  auto vsum = hn::Zero(d);
  i = 0;
  for (; i + N <= n; i += N) {
    const auto e = hn::Exp(d, hn::Sub(hn::LoadU(d, x + i), vm));
    vsum = hn::Add(vsum, e);
    hn::StoreU(e, d, y + i);
  }
  float s = SumLanes(d, vsum);
  for (; i < n; ++i) s += (y[i] = std::exp(x[i] - m));
  const auto inv = hn::Set(d, 1.f / s);
  MapF32(y, y, n, [&](auto, auto v) { return hn::Mul(v, inv); });
}

}  // namespace HWY_NAMESPACE
}  // namespace diffq::backend::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace diffq::backend::cpu {

HWY_EXPORT(SoftmaxRow);

namespace {

void softmax_kernel(const OpCall& c, Tensor& out) {
  const Tensor& x = c.inputs[0];
  const int64_t dim = wrap_dim(c.attrs.i0, x.dim(), "softmax");
  const int64_t n = x.size(dim);
  int64_t inner = 1;
  for (int64_t d = dim + 1; d < x.dim(); ++d) inner *= x.size(d);
  // Rows along `dim`: permute it last; row r is (outer o, inner i) with r = o * inner + i.
  std::vector<int64_t> perm;
  for (int64_t d = 0; d < x.dim(); ++d)
    if (d != dim) perm.push_back(d);
  perm.push_back(dim);
  const Tensor xp = x.permute(perm);
  const RowIterator rows(xp.shape(), xp.strides());
  const DType ot = out.dtype();
  const int64_t oes = int64_t(dtype_size(ot));
  auto* dst = static_cast<uint8_t*>(out.data_ptr());
  parallel_for(rows.num_rows(), std::max<int64_t>(1, 8192 / std::max<int64_t>(n, 1)),
               [&](int64_t b, int64_t e) {
                 auto buf = alloc_f32(n);
                 for (int64_t r = b; r < e; ++r) {
                   load_f32(elem_ptr(x, x.offset() + rows.row_offset(r)), x.dtype(), rows.row_stride(),
                            buf.get(), n);
                   HWY_DYNAMIC_DISPATCH(SoftmaxRow)(buf.get(), buf.get(), n);
                   const int64_t o = r / inner, i = r % inner, base = o * n * inner + i;
                   if (inner == 1) {
                     store_f32(buf.get(), dst + base * oes, ot, n);
                   } else {
                     for (int64_t j = 0; j < n; ++j) store_f32(buf.get() + j, dst + (base + j * inner) * oes, ot, 1);
                   }
                 }
               });
}

}  // namespace

void register_softmax_kernels() {
  ops::register_kernel(OpKind::softmax, DeviceKind::cpu, softmax_kernel);
}

}  // namespace diffq::backend::cpu
#endif  // HWY_ONCE
