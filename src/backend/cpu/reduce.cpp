// reduce (sum / mean / max over any dims, keepdim) and absmax_blocks. Float sums accumulate in f32
// vector lanes per row and in double across rows; integer sums and maxima are exact in int64.
#include "backend/cpu/hwy_config.h"
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backend/cpu/reduce.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

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

double SumRow(const float* x, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t N = int64_t(hn::Lanes(d));
  auto a0 = hn::Zero(d), a1 = hn::Zero(d);
  int64_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    a0 = hn::Add(a0, hn::LoadU(d, x + i));
    a1 = hn::Add(a1, hn::LoadU(d, x + i + N));
  }
  double s = SumLanes(d, hn::Add(a0, a1));
  for (; i < n; ++i) s += x[i];
  return s;
}

// max(x) (NaN if any NaN); with abs: max |x|.
float MaxRow(const float* x, int64_t n, bool abs) {
  const hn::ScalableTag<float> d;
  const int64_t N = int64_t(hn::Lanes(d));
  auto m = hn::Set(d, -INFINITY);
  auto nan = hn::Zero(d);
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    auto v = hn::LoadU(d, x + i);
    if (abs) v = hn::Abs(v);
    nan = hn::IfThenElse(hn::IsNaN(v), v, nan);
    m = hn::Max(m, v);
  }
  float r = MaxLanes(d, m);
  bool any_nan = !hn::AllFalse(d, hn::IsNaN(nan));
  for (; i < n; ++i) {
    const float v = abs ? std::fabs(x[i]) : x[i];
    any_nan |= std::isnan(v);
    r = std::max(r, v);
  }
  return any_nan ? NAN : r;
}

}  // namespace HWY_NAMESPACE
}  // namespace diffq::backend::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace diffq::backend::cpu {

HWY_EXPORT(SumRow);
HWY_EXPORT(MaxRow);

namespace {

void reduce_kernel(const OpCall& c, Tensor& out) {
  const Tensor& x = c.inputs[0];
  const auto fn = ops::ReduceFn(c.attrs.i0);
  std::vector<bool> red(size_t(x.dim()), c.attrs.ints.empty());
  for (int64_t d : c.attrs.ints) red[size_t(wrap_dim(d, x.dim(), "reduce"))] = true;
  std::vector<int64_t> perm;
  int64_t R = 1;
  for (int64_t d = 0; d < x.dim(); ++d)
    if (!red[size_t(d)]) perm.push_back(d);
  for (int64_t d = 0; d < x.dim(); ++d)
    if (red[size_t(d)]) {
      perm.push_back(d);
      R *= x.size(d);
    }
  const Tensor xp = x.permute(perm);
  const RowIterator rows(xp.shape(), xp.strides());
  const int64_t len = rows.row_len(), rows_per_out = len > 0 ? R / len : 0;
  const int64_t nout = out.numel();
  const bool integer = is_integer_like(x.dtype());
  const DType ot = out.dtype();
  void* dst = out.data_ptr();
  parallel_for(nout, std::max<int64_t>(1, 16384 / std::max<int64_t>(R, 1)), [&](int64_t o0, int64_t o1) {
    auto buf = alloc_f32(std::min<int64_t>(len, kMapChunk));
    for (int64_t o = o0; o < o1; ++o) {
      double acc = fn == ops::ReduceFn::max ? -INFINITY : 0.0;
      int64_t iacc = fn == ops::ReduceFn::max ? INT64_MIN : 0;
      for (int64_t j = 0; j < rows_per_out; ++j) {
        const int64_t off = x.offset() + rows.row_offset(o * rows_per_out + j);
        if (integer) {
          for (int64_t i = 0; i < len; ++i) {
            const int64_t v = load_int(x.storage()->data(), x.dtype(), off + i * rows.row_stride());
            iacc = fn == ops::ReduceFn::max ? std::max(iacc, v) : int64_t(uint64_t(iacc) + uint64_t(v));
          }
          continue;
        }
        for (int64_t c0 = 0; c0 < len; c0 += kMapChunk) {
          const int64_t n = std::min(kMapChunk, len - c0);
          const uint8_t* src = elem_ptr(x, off + c0 * rows.row_stride());
          const float* v = reinterpret_cast<const float*>(src);
          if (x.dtype() != DType::f32 || rows.row_stride() != 1) {
            load_f32(src, x.dtype(), rows.row_stride(), buf.get(), n);
            v = buf.get();
          }
          if (fn == ops::ReduceFn::max) {
            const float m = HWY_DYNAMIC_DISPATCH(MaxRow)(v, n, false);
            acc = (std::isnan(m) || std::isnan(acc)) ? NAN : std::max(acc, double(m));
          } else {
            acc += HWY_DYNAMIC_DISPATCH(SumRow)(v, n);
          }
        }
      }
      if (integer) {
        if (fn == ops::ReduceFn::mean) store_from_double(dst, ot, o, double(iacc) / double(R));
        else store_int(dst, ot, o, iacc);
      } else {
        if (fn == ops::ReduceFn::mean) acc /= double(R);
        store_from_double(dst, ot, o, acc);
      }
    }
  });
}

void absmax_kernel(const OpCall& c, Tensor& out) {
  const Tensor& x = c.inputs[0];
  const int64_t block = c.attrs.i0;
  const RowIterator rows(x.shape(), x.strides());
  const int64_t K = rows.row_len(), nb = K / block;
  float* dst = out.data<float>();
  parallel_for(rows.num_rows(), std::max<int64_t>(1, 16384 / std::max<int64_t>(K, 1)), [&](int64_t r0, int64_t r1) {
    auto buf = alloc_f32(K);
    for (int64_t r = r0; r < r1; ++r) {
      const uint8_t* src = elem_ptr(x, x.offset() + rows.row_offset(r));
      const float* v = reinterpret_cast<const float*>(src);
      if (x.dtype() != DType::f32 || rows.row_stride() != 1) {
        load_f32(src, x.dtype(), rows.row_stride(), buf.get(), K);
        v = buf.get();
      }
      for (int64_t bi = 0; bi < nb; ++bi) dst[r * nb + bi] = HWY_DYNAMIC_DISPATCH(MaxRow)(v + bi * block, block, true);
    }
  });
}

}  // namespace

void register_reduce_kernels() {
  ops::register_kernel(OpKind::reduce, DeviceKind::cpu, reduce_kernel);
  ops::register_kernel(OpKind::absmax_blocks, DeviceKind::cpu, absmax_kernel);
}

}  // namespace diffq::backend::cpu
#endif  // HWY_ONCE
