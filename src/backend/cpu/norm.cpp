// layer_norm and rms_norm over the last dim, group_norm over (C/groups x spatial) blocks. Statistics
// in f32 vector lanes (blocks of a group are summed in double), output rounded once to x's dtype.
#include "backend/cpu/row_kernels.h"
#include "backend/cpu/hwy_config.h"
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backend/cpu/norm.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <cmath>
#include <optional>
#include <vector>

#include "backend/cpu/common.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/simd-inl.h"
#include "backend/cpu/activation-inl.h"
#include "backend/cpu/strided.h"
#include "backend/cpu/threads.h"

HWY_BEFORE_NAMESPACE();
namespace diffq::backend::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// sum(x) and sum((x - shift)^2) of n floats.
void SumAndSquares(const float* x, int64_t n, float shift, double* sum, double* sq) {
  const hn::ScalableTag<float> d;
  const int64_t N = int64_t(hn::Lanes(d));
  const auto vs = hn::Set(d, shift);
  auto a0 = hn::Zero(d), a1 = hn::Zero(d), q0 = hn::Zero(d), q1 = hn::Zero(d);
  int64_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    const auto v0 = hn::LoadU(d, x + i), v1 = hn::LoadU(d, x + i + N);
    a0 = hn::Add(a0, v0);
    a1 = hn::Add(a1, v1);
    const auto c0 = hn::Sub(v0, vs), c1 = hn::Sub(v1, vs);
    q0 = hn::MulAdd(c0, c0, q0);
    q1 = hn::MulAdd(c1, c1, q1);
  }
  double s = SumLanes(d, hn::Add(a0, a1)), q = SumLanes(d, hn::Add(q0, q1));
  for (; i < n; ++i) {
    s += x[i];
    q += double(x[i] - shift) * double(x[i] - shift);
  }
  *sum = s;
  *sq = q;
}

// y = (x - mean) * rstd * w + b, with w / b optional (nullptr).
void NormalizeRow(const float* x, float* y, int64_t n, float mean, float rstd, const float* w,
                  const float* b) {
  const hn::ScalableTag<float> d;
  const int64_t N = int64_t(hn::Lanes(d));
  const auto vm = hn::Set(d, mean), vr = hn::Set(d, rstd);
  auto one = [&](int64_t i, size_t len) {
    auto v = len == size_t(N) ? hn::LoadU(d, x + i) : LoadTail(d, x + i, len);
    v = hn::Mul(hn::Sub(v, vm), vr);
    if (w) v = hn::Mul(v, len == size_t(N) ? hn::LoadU(d, w + i) : LoadTail(d, w + i, len));
    if (b) v = hn::Add(v, len == size_t(N) ? hn::LoadU(d, b + i) : LoadTail(d, b + i, len));
    if (len == size_t(N)) hn::StoreU(v, d, y + i);
    else StoreTail(v, d, y + i, len);
  };
  int64_t i = 0;
  for (; i + N <= n; i += N) one(i, size_t(N));
  if (i < n) one(i, size_t(n - i));
}

// y = (x - mean) * scale + shift over n floats.
void ScaleShiftRow(const float* x, float* y, int64_t n, float mean, float scale, float shift) {
  const hn::ScalableTag<float> d;
  const auto vm = hn::Set(d, mean), vs = hn::Set(d, scale), vb = hn::Set(d, shift);
  MapF32(x, y, n, [&](auto, auto v) { return hn::MulAdd(hn::Sub(v, vm), vs, vb); });
}

// out[i] = round((x[i] - mean) * scale + shift), or with silu: round(silu(round(...))), rounded to bf16
// (bf16_out) or stored as f32: ScaleShiftRow then store_f32 (and the unary op's silu), in one pass.
void ScaleShiftStoreRow(const float* x, void* out, bool bf16_out, int64_t n, float mean, float scale, float shift,
                        bool silu) {
  const hn::ScalableTag<float> d;
  const hn::RebindToUnsigned<decltype(d)> du;
  const hn::RebindToSigned<decltype(d)> di;
  const hn::Rebind<uint16_t, decltype(d)> du16;
  const int64_t N = int64_t(hn::Lanes(d));
  const auto vm = hn::Set(d, mean), vs = hn::Set(d, scale), vb = hn::Set(d, shift);
  auto value = [&](hn::Vec<decltype(d)> v) {
    v = hn::MulAdd(hn::Sub(v, vm), vs, vb);
    if (bf16_out) v = RoundToBf16(d, v);
    if (silu) v = Silu(d, v);
    return bf16_out ? RoundToBf16(d, v) : v;
  };
  auto* of = static_cast<float*>(out);
  auto* ob = static_cast<uint16_t*>(out);
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    const auto v = value(hn::LoadU(d, x + i));
    if (bf16_out) hn::StoreU(hn::DemoteTo(du16, hn::BitCast(di, hn::ShiftRight<16>(hn::BitCast(du, v)))), du16, ob + i);
    else hn::StoreU(v, d, of + i);
  }
  if (i == n) return;
  HWY_ALIGN float tail[kMaxFloatLanes];
  hn::Store(value(LoadTail(d, x + i, size_t(n - i))), d, tail);
  for (int64_t j = 0; j < n - i; ++j) {
    if (bf16_out) {
      uint32_t u;
      std::memcpy(&u, tail + j, 4);
      ob[i + j] = uint16_t(u >> 16);
    } else {
      of[i + j] = tail[j];
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace diffq::backend::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace diffq::backend::cpu {

HWY_EXPORT(SumAndSquares);
HWY_EXPORT(NormalizeRow);
HWY_EXPORT(ScaleShiftRow);
HWY_EXPORT(ScaleShiftStoreRow);

void sum_and_squares_f32(const float* x, int64_t n, float shift, double* sum, double* sq) {
  HWY_DYNAMIC_DISPATCH(SumAndSquares)(x, n, shift, sum, sq);
}
void normalize_row_f32(const float* x, float* y, int64_t n, float mean, float rstd, const float* w,
                       const float* b) {
  HWY_DYNAMIC_DISPATCH(NormalizeRow)(x, y, n, mean, rstd, w, b);
}

namespace {

std::unique_ptr<F32Input> optional_input(const OpCall& c, size_t i) {
  if (c.inputs.size() > i && c.inputs[i].defined()) return std::make_unique<F32Input>(c.inputs[i]);
  return nullptr;
}

// Shared driver of layer_norm / rms_norm: per row of the last dim.
void row_norm(const OpCall& c, Tensor& out, bool rms) {
  const Tensor& x = c.inputs[0];
  const auto w = optional_input(c, 1);
  const auto b = rms ? nullptr : optional_input(c, 2);
  const float* wp = w ? w->data() : nullptr;
  const float* bp = b ? b->data() : nullptr;
  const double eps = c.attrs.f0;
  const RowIterator rows(x.shape(), x.strides());
  const int64_t n = rows.row_len();
  const DType ot = out.dtype();
  const int64_t oes = int64_t(dtype_size(ot));
  auto* dst = static_cast<uint8_t*>(out.data_ptr());
  parallel_for(rows.num_rows(), std::max<int64_t>(1, 8192 / std::max<int64_t>(n, 1)),
               [&](int64_t r0, int64_t r1) {
                 auto buf = alloc_f32(n);
                 for (int64_t r = r0; r < r1; ++r) {
                   float* v = buf.get();
                   load_f32(elem_ptr(x, x.offset() + rows.row_offset(r)), x.dtype(), rows.row_stride(), v, n);
                   double s = 0, q = 0;
                   float mean = 0;
                   if (!rms) {
                     HWY_DYNAMIC_DISPATCH(SumAndSquares)(v, n, 0.f, &s, &q);
                     mean = float(s / double(n));
                   }
                   HWY_DYNAMIC_DISPATCH(SumAndSquares)(v, n, mean, &s, &q);
                   const float rstd = float(1.0 / std::sqrt(q / double(n) + eps));
                   float* y = ot == DType::f32 ? reinterpret_cast<float*>(dst) + r * n : v;
                   HWY_DYNAMIC_DISPATCH(NormalizeRow)(v, y, n, mean, rstd, wp, bp);
                   if (ot != DType::f32) store_f32(v, dst + r * n * oes, ot, n);
                 }
               });
}

void layer_norm_kernel(const OpCall& c, Tensor& out) { row_norm(c, out, false); }
void rms_norm_kernel(const OpCall& c, Tensor& out) { row_norm(c, out, true); }

// One (image, group) block at a time, in cache: a contiguous input's block is widened into the
// thread's scratch (f32 input: used in place), its two-pass statistics taken there, and each channel
// normalized from there straight into out's dtype (one read and one write of the tensor in memory).
// Other layouts go through a contiguous f32 copy first. Same arithmetic either way.
void group_norm_kernel(const OpCall& c, Tensor& out) {
  const Tensor& x = c.inputs[0];
  const int64_t N = x.size(0), C = x.size(1), G = c.attrs.i0, cg = C / G;
  const int64_t spatial = x.numel() / std::max<int64_t>(N * C, 1), block = cg * spatial;
  const auto w = optional_input(c, 1);
  const auto b = optional_input(c, 2);
  const bool in_place = x.is_contiguous();
  std::optional<F32Input> xin;
  if (!in_place) xin.emplace(x);
  const uint8_t* xbytes = in_place ? elem_ptr(x, x.offset()) : nullptr;
  const DType xt = x.dtype(), ot = out.dtype();
  const int64_t xes = int64_t(dtype_size(xt)), oes = int64_t(dtype_size(ot));
  auto* obytes = static_cast<uint8_t*>(out.data_ptr());
  const double eps = c.attrs.f0;
  const bool silu = c.attrs.flag;  // silu(group_norm(x)) (ops::group_norm_silu)
  constexpr int64_t kChunk = 4096;
  parallel_for(N * G, 1, [&](int64_t p0, int64_t p1) {
    thread_local std::vector<float> scratch, row;
    for (int64_t p = p0; p < p1; ++p) {
      const float* src;
      if (!in_place) {
        src = xin->data() + p * block;
      } else if (xt == DType::f32) {
        src = reinterpret_cast<const float*>(xbytes) + p * block;
      } else {
        scratch.resize(size_t(block));
        load_f32(xbytes + p * block * xes, xt, 1, scratch.data(), block);
        src = scratch.data();
      }
      double s = 0, q = 0, cs, cq;
      for (int64_t i = 0; i < block; i += kChunk) {
        HWY_DYNAMIC_DISPATCH(SumAndSquares)(src + i, std::min(kChunk, block - i), 0.f, &cs, &cq);
        s += cs;
      }
      const double mean = s / double(block);
      for (int64_t i = 0; i < block; i += kChunk) {
        HWY_DYNAMIC_DISPATCH(SumAndSquares)(src + i, std::min(kChunk, block - i), float(mean), &cs, &cq);
        q += cq;
      }
      const double rstd = 1.0 / std::sqrt(q / double(block) + eps);
      const int64_t g = p % G;
      for (int64_t k = 0; k < cg; ++k) {
        const int64_t ch = g * cg + k;
        const double scale = rstd * (w ? w->data()[ch] : 1.0);
        const float shift = b ? b->data()[ch] : 0.f;
        uint8_t* dst = obytes + (p * block + k * spatial) * oes;
        if (ot == DType::f32 || ot == DType::bf16) {
          HWY_DYNAMIC_DISPATCH(ScaleShiftStoreRow)(src + k * spatial, dst, ot == DType::bf16, spatial, float(mean),
                                                   float(scale), shift, silu);
          continue;
        }
        // f16: chunks that stay in L1: the norm rounded to f16, then (silu) widened back exactly, silu in
        // f32 and rounded again: the two ops' values.
        row.resize(size_t(std::min(kChunk, spatial)));
        for (int64_t i = 0; i < spatial; i += kChunk) {
          const int64_t len = std::min(kChunk, spatial - i);
          uint8_t* d = dst + i * oes;
          HWY_DYNAMIC_DISPATCH(ScaleShiftRow)(src + k * spatial + i, row.data(), len, float(mean), float(scale),
                                              shift);
          store_f32(row.data(), d, ot, len);
          if (!silu) continue;
          load_f32(d, ot, 1, row.data(), len);
          unary_row_f32(ops::UnaryFn::silu, row.data(), row.data(), len);
          store_f32(row.data(), d, ot, len);
        }
      }
    }
  });
}

}  // namespace

void register_norm_kernels() {
  ops::register_kernel(OpKind::layer_norm, DeviceKind::cpu, layer_norm_kernel);
  ops::register_kernel(OpKind::rms_norm, DeviceKind::cpu, rms_norm_kernel);
  ops::register_kernel(OpKind::group_norm, DeviceKind::cpu, group_norm_kernel);
}

}  // namespace diffq::backend::cpu
#endif  // HWY_ONCE
