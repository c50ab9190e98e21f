// rms_norm_rope (ops/op.h): per row (b, s, h) of the output [B, S, H, D], the RMSNorm of the input segment holding
// s with that segment's weight (norm.cpp's arithmetic: SumAndSquares, NormalizeRow), rounded to the norm's dtype
// (x's), then the rotary embedding with row s of the tables (rope.cpp's RopeRow), rounded to the output's dtype:
// the bits of rms_norm, concat and rope, each row read once and written once (FLUX's q / k: three passes over
// the rows and a concat's copy become one pass). Built with -ffp-contract=off, as norm.cpp and rope.cpp.
#include "backend/cpu/hwy_config.h"
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backend/cpu/norm_rope.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <cmath>
#include <memory>
#include <vector>

#include "backend/cpu/common.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/simd-inl.h"
#include "backend/cpu/norm_row-inl.h"
#include "backend/cpu/rope_row-inl.h"
#include "backend/cpu/threads.h"

#ifndef DIFFQ_NORM_ROPE_SEGMENT_
#define DIFFQ_NORM_ROPE_SEGMENT_  // (this file is compiled once per SIMD target: the struct once)
namespace diffq::backend::cpu {
// The input segments along the sequence: segment k covers positions [s0, s0 + len) of the output.
struct NormRopeSegment {
  const uint8_t* x = nullptr;  // element 0 of the segment's view
  int64_t s0 = 0, len = 0;
  int64_t stride_b = 0, stride_s = 0, stride_h = 0, stride_d = 1;  // elements
  const float* w = nullptr;    // [D] or null
};
}  // namespace diffq::backend::cpu
#endif

HWY_BEFORE_NAMESPACE();
namespace diffq::backend::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Output rows [r0, r1) of [B, S, H, D] (contiguous, dtype yt; the inputs' dtype xt). buf: 2 D floats.
void NormRopeRows(const NormRopeSegment* segs, int64_t nsegs, DType xt, int64_t S, int64_t H, int64_t D, double eps,
                  const float* cs, const float* sn, int64_t r0, int64_t r1, uint8_t* y, DType yt, float* buf) {
  const int64_t xes = int64_t(dtype_size(xt)), yes = int64_t(dtype_size(yt));
  float* const res = buf + D;
  // (b, s, h) of row r0, then stepped row by row (no divisions per row: FLUX's rows are 128 elements)
  int64_t h = r0 % H, s = (r0 / H) % S, b = r0 / (H * S), k = 0;
  while (k + 1 < nsegs && s >= segs[k + 1].s0) ++k;
  for (int64_t r = r0; r < r1; ++r) {
    const NormRopeSegment& g = segs[k];
    const uint8_t* src = g.x + (b * g.stride_b + (s - g.s0) * g.stride_s + h * g.stride_h) * xes;
    const float* v = RowAsF32(src, xt, g.stride_d, buf, D);
    // rms_norm (NormRows with rms): the statistics, the normalised row, rounded to the norm's dtype (x's) and back.
    double sum = 0, q = 0;
    SumAndSquares(v, D, 0.f, &sum, &q);
    const float rstd = float(1.0 / std::sqrt(q / double(D) + eps));
    NormalizeRow(v, buf, D, 0.f, rstd, g.w, nullptr);
    if (xt == DType::bf16) {
      MapF32(buf, buf, D, [](auto d, auto v) { return RoundToBf16(d, v); });  // (StoreRowAs's rounding, in place)
    } else if (xt != DType::f32) {
      auto* rounded = reinterpret_cast<uint8_t*>(res);  // (D floats hold D values of any narrower dtype)
      StoreRowAs(buf, rounded, xt, D);
      RowAsF32(rounded, xt, 1, buf, D);
    }
    RopeRowTo(buf, cs + s * D, sn + s * D, y + r * D * yes, yt, D, res);  // rope on the rounded row
    if (++h == H) {  // the next row's position
      h = 0;
      if (++s == S) s = 0, ++b, k = 0;
      while (k + 1 < nsegs && s >= segs[k + 1].s0) ++k;
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace diffq::backend::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace diffq::backend::cpu {

HWY_EXPORT(NormRopeRows);

namespace {

// inputs: cos, sin, then (x, w) per segment (w undefined: no weight); attrs.f0 = eps.
void rms_norm_rope_kernel(const OpCall& c, Tensor& out) {
  const F32Input cs(c.inputs[0]), sn(c.inputs[1]);
  const int64_t S = out.size(1), H = out.size(2), D = out.size(3);
  std::vector<NormRopeSegment> segs;
  std::vector<std::unique_ptr<F32Input>> weights;
  int64_t s0 = 0;
  for (size_t i = 2; i + 1 < c.inputs.size(); i += 2) {
    const Tensor& x = c.inputs[i];
    NormRopeSegment g;
    g.x = static_cast<const uint8_t*>(x.data_ptr());
    g.s0 = s0;
    g.len = x.size(1);
    g.stride_b = x.strides()[0], g.stride_s = x.strides()[1], g.stride_h = x.strides()[2], g.stride_d = x.strides()[3];
    if (c.inputs[i + 1].defined()) {
      weights.push_back(std::make_unique<F32Input>(c.inputs[i + 1]));
      g.w = weights.back()->data();
    }
    segs.push_back(g);
    s0 += g.len;
  }
  const DType xt = c.inputs[2].dtype();
  auto* dst = static_cast<uint8_t*>(out.data_ptr());
  const int64_t rows = out.numel() / std::max<int64_t>(D, 1);
  parallel_for(rows, std::max<int64_t>(1, 8192 / std::max<int64_t>(D, 1)), [&](int64_t r0, int64_t r1) {
    auto buf = alloc_f32(2 * D);
    HWY_DYNAMIC_DISPATCH(NormRopeRows)(segs.data(), int64_t(segs.size()), xt, S, H, D, c.attrs.f0, cs.data(),
                                       sn.data(), r0, r1, dst, out.dtype(), buf.get());
  });
}

}  // namespace

void register_norm_rope_kernel() {
  ops::register_kernel(OpKind::rms_norm_rope, DeviceKind::cpu, rms_norm_rope_kernel);
}

}  // namespace diffq::backend::cpu
#endif  // HWY_ONCE
