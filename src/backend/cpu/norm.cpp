// layer_norm and rms_norm over the last dim, group_norm over (C/groups x spatial) blocks. Statistics
// in f32 vector lanes (blocks of a group are summed in double), output rounded once to x's dtype.
#include "backend/cpu/row_kernels.h"
#include "backend/cpu/hwy_config.h"
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backend/cpu/norm.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <tuple>
#include <vector>

#include "backend/channels_last.h"
#include "backend/cpu/common.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/simd-inl.h"
#include "backend/cpu/norm_row-inl.h"
#include "backend/cpu/activation-inl.h"
#include "backend/cpu/strided.h"
#include "backend/cpu/threads.h"

HWY_BEFORE_NAMESPACE();
namespace diffq::backend::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// y = (x - mean) * scale + shift over n floats.
void ScaleShiftRow(const float* x, float* y, int64_t n, float mean, float scale, float shift) {
  const hn::ScalableTag<float> d;
  const auto vm = hn::Set(d, mean), vs = hn::Set(d, scale), vb = hn::Set(d, shift);
  MapF32(x, y, n, [&](auto, auto v) { return hn::MulAdd(hn::Sub(v, vm), vs, vb); });
}

// Lanes [i, i + len) of a row of f32, or of bf16 widened exactly (zeros past len).
template <bool kBf16, class D>
HWY_INLINE hn::Vec<D> LoadLanes(D d, const void* row, int64_t i, size_t len) {
  if constexpr (kBf16) {
    const auto* p = static_cast<const uint16_t*>(row) + i;
    if (len == hn::Lanes(d)) return LoadBf16(d, p);
    HWY_ALIGN uint16_t buf[kMaxFloatLanes] = {};
    std::memcpy(buf, p, len * 2);
    return LoadBf16(d, buf);
  } else {
    const float* p = static_cast<const float*>(row) + i;
    return len == hn::Lanes(d) ? hn::LoadU(d, p) : LoadTail(d, p, len);
  }
}

// out[i] = round((x[i] - mean_i) * scale_i + shift_i), or with silu: round(silu(round(...))), rounded to
// bf16 (bf16_out) or stored as f32: ScaleShiftRow then store_f32 (and the unary op's silu: on bf16 outputs
// its table, silu_table = bf16_unary_table(silu)), in one pass.
// x: f32 (or bf16: kBf16, widened exactly); params(d, i, len) gives lanes [i, i + len) of mean, scale, shift.
template <bool kBf16, class Params>
HWY_INLINE void ScaleShiftStore(const void* x, void* out, bool bf16_out, int64_t n, bool silu, const uint16_t* silu_table,
                                const Params& params) {
  const hn::ScalableTag<float> d;
  const int64_t N = int64_t(hn::Lanes(d));
  auto value = [&](int64_t i, size_t len) {
    auto v = LoadLanes<kBf16>(d, x, i, len);
    const auto [vm, vs, vb] = params(d, i, len);
    v = hn::MulAdd(hn::Sub(v, vm), vs, vb);
    if (bf16_out) v = RoundToBf16(d, v);
    if (silu) v = bf16_out ? Bf16TableLookup(d, v, silu_table) : Silu(d, v);
    return bf16_out ? RoundToBf16(d, v) : v;
  };
  auto* of = static_cast<float*>(out);
  auto* ob = static_cast<uint16_t*>(out);
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    const auto v = value(i, size_t(N));
    if (bf16_out) StoreRoundedBf16(d, v, ob + i);
    else hn::StoreU(v, d, of + i);
  }
  if (i == n) return;
  HWY_ALIGN float tail[kMaxFloatLanes] = {};  // (initialised: GCC 12 cannot see the Store fill it)
  hn::Store(value(i, size_t(n - i)), d, tail);
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

// One mean, scale and shift for the whole f32 row (a channels-first channel).
void ScaleShiftStoreRow(const float* x, void* out, bool bf16_out, int64_t n, float mean, float scale, float shift,
                        bool silu) {
  const uint16_t* table = silu && bf16_out ? bf16_unary_table(ops::UnaryFn::silu) : nullptr;
  ScaleShiftStore<false>(x, out, bf16_out, n, silu, table, [&](auto d, int64_t, size_t) {
    return std::tuple{hn::Set(d, mean), hn::Set(d, scale), hn::Set(d, shift)};
  });
}

// Channels-last pixels: rows x[p, 0..C) of f32 or bf16 (bf16_in), p in [0, P), each normalised per channel
// (mean[c], scale[c], shift[c]) into out's row p.
void ScaleShiftStorePixels(const void* x, bool bf16_in, int64_t P, int64_t C, void* out, bool bf16_out,
                           const float* mean, const float* scale, const float* shift, bool silu) {
  auto params = [&](auto d, int64_t i, size_t len) {
    if (len == hn::Lanes(d)) return std::tuple{hn::LoadU(d, mean + i), hn::LoadU(d, scale + i), hn::LoadU(d, shift + i)};
    return std::tuple{LoadTail(d, mean + i, len), LoadTail(d, scale + i, len), LoadTail(d, shift + i, len)};
  };
  const size_t ies = bf16_in ? 2 : 4, oes = bf16_out ? 2 : 4;
  const uint16_t* table = silu && bf16_out ? bf16_unary_table(ops::UnaryFn::silu) : nullptr;
  for (int64_t p = 0; p < P; ++p) {
    const void* row = static_cast<const uint8_t*>(x) + size_t(p * C) * ies;
    void* dst = static_cast<uint8_t*>(out) + size_t(p * C) * oes;
    if (bf16_in) ScaleShiftStore<true>(row, dst, bf16_out, C, silu, table, params);
    else ScaleShiftStore<false>(row, dst, bf16_out, C, silu, table, params);
  }
}

// Channels-last moments over pixels: s[c] = sum_p (x[p, c] - k[c]), q[c] = sum_p (x[p, c] - k[c])^2 for
// x [P, C] of f32 or bf16 (widened exactly), in f32 lanes (two channel vectors per pass over the pixels).
template <bool kBf16>
void PixelMomentsT(const void* x, int64_t P, int64_t C, const float* k, float* s, float* q) {
  const hn::ScalableTag<float> d;
  const int64_t N = int64_t(hn::Lanes(d));
  const size_t es = kBf16 ? 2 : 4;
  auto row = [&](int64_t p) { return static_cast<const uint8_t*>(x) + size_t(p * C) * es; };
  int64_t c = 0;
  for (; c + 2 * N <= C; c += 2 * N) {
    const auto k0 = hn::LoadU(d, k + c), k1 = hn::LoadU(d, k + c + N);
    auto s0 = hn::Zero(d), s1 = hn::Zero(d), q0 = hn::Zero(d), q1 = hn::Zero(d);
    for (int64_t p = 0; p < P; ++p) {
      const auto v0 = hn::Sub(LoadLanes<kBf16>(d, row(p), c, size_t(N)), k0);
      const auto v1 = hn::Sub(LoadLanes<kBf16>(d, row(p), c + N, size_t(N)), k1);
      s0 = hn::Add(s0, v0);
      s1 = hn::Add(s1, v1);
      q0 = hn::MulAdd(v0, v0, q0);
      q1 = hn::MulAdd(v1, v1, q1);
    }
    hn::StoreU(s0, d, s + c);
    hn::StoreU(s1, d, s + c + N);
    hn::StoreU(q0, d, q + c);
    hn::StoreU(q1, d, q + c + N);
  }
  for (; c < C; c += N) {
    const size_t len = size_t(std::min(N, C - c));
    const auto kv = LoadTail(d, k + c, len);
    auto sv = hn::Zero(d), qv = hn::Zero(d);
    for (int64_t p = 0; p < P; ++p) {
      const auto v = hn::Sub(LoadLanes<kBf16>(d, row(p), c, len), kv);
      sv = hn::Add(sv, v);
      qv = hn::MulAdd(v, v, qv);
    }
    StoreTail(sv, d, s + c, len);
    StoreTail(qv, d, q + c, len);
  }
}

void PixelMoments(const void* x, bool bf16, int64_t P, int64_t C, const float* k, float* s, float* q) {
  if (bf16) PixelMomentsT<true>(x, P, C, k, s, q);
  else PixelMomentsT<false>(x, P, C, k, s, q);
}

// Rows [r0, r1) of layer_norm (rms: rms_norm) over rows of n (dtype xt, row r at element rows.row_offset(r) of x,
// r * n when contiguous) into the contiguous rows of y (dtype yt): each row widened to f32, its statistics
// (SumAndSquares), NormalizeRow, rounded once to yt. One dispatch per chunk of rows, bf16 rows of unit stride
// converted in the target: FLUX's per-head norms run rows of 128, where a dispatched conversion per row costs
// about what the arithmetic does. buf: n floats.
void NormRows(const uint8_t* x, DType xt, const RowIterator& rows, bool contiguous, int64_t r0, int64_t r1, bool rms,
              double eps, const float* w, const float* b, uint8_t* y, DType yt, float* buf) {
  const int64_t n = rows.row_len(), stride = rows.row_stride();
  const int64_t xes = int64_t(dtype_size(xt)), yes = int64_t(dtype_size(yt));
  for (int64_t r = r0; r < r1; ++r) {
    const float* v = RowAsF32(x + (contiguous ? r * n : rows.row_offset(r)) * xes, xt, stride, buf, n);
    double s = 0, q = 0;
    float mean = 0;
    if (!rms) {
      SumAndSquares(v, n, 0.f, &s, &q);
      mean = float(s / double(n));
    }
    SumAndSquares(v, n, mean, &s, &q);
    const float rstd = float(1.0 / std::sqrt(q / double(n) + eps));
    float* out = yt == DType::f32 ? reinterpret_cast<float*>(y) + r * n : buf;
    NormalizeRow(v, out, n, mean, rstd, w, b);
    if (yt != DType::f32) StoreRowAs(buf, y + r * n * yes, yt, n);
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
HWY_EXPORT(ScaleShiftStorePixels);
HWY_EXPORT(PixelMoments);
HWY_EXPORT(NormRows);

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
  const auto* xb = static_cast<const uint8_t*>(x.data_ptr());
  auto* dst = static_cast<uint8_t*>(out.data_ptr());
  const bool contiguous = x.is_contiguous();
  parallel_for(rows.num_rows(), std::max<int64_t>(1, 8192 / std::max<int64_t>(n, 1)), [&](int64_t r0, int64_t r1) {
    auto buf = alloc_f32(n);
    HWY_DYNAMIC_DISPATCH(NormRows)(xb, x.dtype(), rows, contiguous, r0, r1, rms, eps, wp, bp, dst, out.dtype(),
                                   buf.get());
  });
}

void layer_norm_kernel(const OpCall& c, Tensor& out) { row_norm(c, out, false); }
void rms_norm_kernel(const OpCall& c, Tensor& out) { row_norm(c, out, true); }

// Channels-last x [N, P, C] (f32 / bf16, contiguous): per image, each group's moments in one pass over the
// pixels, shifted by the group's mean over the image's first pixel (s = sum(x - k), q = sum((x - k)^2):
// mean = k + s / n, var = q / n - (s / n)^2): f32 per channel over chunks of kPixels pixels, the chunks'
// sums in double in chunk order (the same bits at any thread count). Then every pixel's row of C
// normalised per channel straight into out (one more read and the write).
void group_norm_channels_last(const OpCall& c, Tensor& out) {
  const Tensor& x = c.inputs[0];
  const int64_t N = x.size(0), C = x.size(-1), G = c.attrs.i0, cg = C / G;
  const int64_t P = x.numel() / std::max<int64_t>(N * C, 1), cnt = cg * P;
  const auto w = optional_input(c, 1);
  const auto b = optional_input(c, 2);
  const DType xt = x.dtype(), ot = out.dtype();
  const int64_t xes = int64_t(dtype_size(xt)), oes = int64_t(dtype_size(ot));
  const auto* xb = static_cast<const uint8_t*>(x.data_ptr());
  auto* ob = static_cast<uint8_t*>(out.data_ptr());
  constexpr int64_t kPixels = 256;
  const int64_t chunks = (P + kPixels - 1) / kPixels;
  std::vector<float> shift(size_t(N * C)), mean(size_t(N * C)), scale(size_t(N * C)), bias(size_t(C), 0.f);
  if (b) std::copy(b->data(), b->data() + C, bias.begin());
  std::vector<double> part(size_t(N * chunks * 2 * C));  // per (image, chunk): s[C], q[C]
  {
    std::vector<float> first(static_cast<size_t>(C));
    for (int64_t n = 0; n < N; ++n) {
      load_f32(xb + n * P * C * xes, xt, 1, first.data(), C);
      for (int64_t g = 0; g < G; ++g) {
        double k = 0;
        for (int64_t j = 0; j < cg; ++j) k += first[size_t(g * cg + j)];
        for (int64_t j = 0; j < cg; ++j) shift[size_t(n * C + g * cg + j)] = float(k / double(cg));
      }
    }
  }
  const bool bf16_in = xt == DType::bf16;
  parallel_for(N * chunks, 1, [&](int64_t t0, int64_t t1) {
    thread_local std::vector<float> s, q;
    s.resize(size_t(C));
    q.resize(size_t(C));
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t n = t / chunks, p0 = (t % chunks) * kPixels, p1 = std::min(P, p0 + kPixels);
      HWY_DYNAMIC_DISPATCH(PixelMoments)(xb + (n * P + p0) * C * xes, bf16_in, p1 - p0, C, shift.data() + n * C,
                                         s.data(), q.data());
      double* dst = part.data() + t * 2 * C;
      for (int64_t ch = 0; ch < C; ++ch) dst[ch] = s[size_t(ch)], dst[C + ch] = q[size_t(ch)];
    }
  });
  for (int64_t n = 0; n < N; ++n)
    for (int64_t g = 0; g < G; ++g) {
      double sum = 0, sq = 0;
      for (int64_t k = 0; k < chunks; ++k)
        for (int64_t j = 0; j < cg; ++j) {
          const double* pt = part.data() + (n * chunks + k) * 2 * C;
          sum += pt[g * cg + j];
          sq += pt[C + g * cg + j];
        }
      const double d = sum / double(cnt);
      const double m = double(shift[size_t(n * C + g * cg)]) + d;
      const double rstd = 1.0 / std::sqrt(std::max(0.0, sq / double(cnt) - d * d) + c.attrs.f0);
      for (int64_t j = 0; j < cg; ++j) {
        const int64_t ch = g * cg + j;
        mean[size_t(n * C + ch)] = float(m);
        scale[size_t(n * C + ch)] = float(rstd * (w ? w->data()[ch] : 1.0));
      }
    }
  const bool silu = c.attrs.flag;
  // Runs of pixels of one image, ~4096 elements a task.
  const int64_t run = std::max<int64_t>(1, 4096 / std::max<int64_t>(C, 1)), runs = (P + run - 1) / run;
  parallel_for(N * runs, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t n = t / runs, p0 = (t % runs) * run, p1 = std::min(P, p0 + run);
      HWY_DYNAMIC_DISPATCH(ScaleShiftStorePixels)(xb + (n * P + p0) * C * xes, bf16_in, p1 - p0, C,
                                                  ob + (n * P + p0) * C * oes, ot == DType::bf16, mean.data() + n * C,
                                                  scale.data() + n * C, bias.data(), silu);
    }
  });
}

// One (image, group) block at a time, in cache: a contiguous input's block is widened into the
// thread's scratch (f32 input: used in place), its two-pass statistics taken there, and each channel
// normalized from there straight into out's dtype (one read and one write of the tensor in memory).
// Other layouts go through a contiguous f32 copy first. Same arithmetic either way.
void group_norm_kernel(const OpCall& c, Tensor& out) {
  if (is_channels_last(c)) {
    const DType xt = c.inputs[0].dtype(), ot = out.dtype();
    if (c.inputs[0].is_contiguous() && (xt == DType::f32 || xt == DType::bf16) && (ot == DType::f32 || ot == DType::bf16))
      return group_norm_channels_last(c, out);
    return run_channels_first(c, out, group_norm_kernel);  // f16, views: the channels-first kernel on copies
  }
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
