// channel_norm on the CPU: x [N, C, spatial...] / max(||x[n, :, p]||_2, eps) * scale * w[c] (F.normalize
// over dim 1, scaled: Wan's RMS_norm). Per image, pixels go in blocks: the squares of the C channel rows
// of a block are summed into an f32 accumulator, then each row is scaled straight into out's dtype. Two
// reads of x and one write, f32 arithmetic. A bf16 output is rounded after the normalisation and after
// each product, as Diffusers' F.normalize(x.float()).to(bf16) * scale * gamma is (other dtypes: once).
#include "backend/cpu/hwy_config.h"
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backend/cpu/channel_norm.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include "backend/cpu/common.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/row_kernels.h"
#include "backend/cpu/simd-inl.h"
#include "backend/cpu/threads.h"

HWY_BEFORE_NAMESPACE();
namespace diffq::backend::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// acc[i] += x[i]^2 over n floats.
void AddSquares(const float* x, float* acc, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t N = int64_t(hn::Lanes(d));
  int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(hn::MulAdd(hn::LoadU(d, x + i), hn::LoadU(d, x + i), hn::LoadU(d, acc + i)), d, acc + i);
  for (; i < n; ++i) acc[i] += x[i] * x[i];
}

// y[i] = x[i] * inv[i] * scale * w over n floats. With round_bf16, each step is rounded to bf16 (nearest
// even) as torch's op-by-op bf16 computation: bf16(bf16(bf16(x * inv) * scale) * w).
void ScaleRows(const float* x, const float* inv, float scale, float w, float* y, int64_t n, bool round_bf16) {
  const hn::ScalableTag<float> d;
  const hn::RebindToUnsigned<decltype(d)> du;
  const int64_t N = int64_t(hn::Lanes(d));
  const auto vs = hn::Set(d, scale), vw = hn::Set(d, w);
  const auto bias = hn::Set(du, 0x7FFFu), one = hn::Set(du, 1u), hi = hn::Set(du, 0xFFFF0000u);
  auto rnd = [&](auto v) {  // finite values only (a norm's output)
    const auto u = hn::BitCast(du, v);
    const auto r = hn::Add(u, hn::Add(bias, hn::And(hn::ShiftRight<16>(u), one)));
    return hn::BitCast(d, hn::And(r, hi));
  };
  int64_t i = 0;
  if (round_bf16) {
    for (; i + N <= n; i += N)
      hn::StoreU(rnd(hn::Mul(rnd(hn::Mul(rnd(hn::Mul(hn::LoadU(d, x + i), hn::LoadU(d, inv + i))), vs)), vw)), d, y + i);
  } else {
    const auto sw = hn::Set(d, scale * w);
    for (; i + N <= n; i += N) hn::StoreU(hn::Mul(hn::Mul(hn::LoadU(d, x + i), hn::LoadU(d, inv + i)), sw), d, y + i);
  }
  for (; i < n; ++i) {
    if (round_bf16) y[i] = bf16_to_f32(f32_to_bf16(bf16_to_f32(f32_to_bf16(bf16_to_f32(f32_to_bf16(x[i] * inv[i])) * scale)) * w));
    else y[i] = x[i] * inv[i] * (scale * w);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace diffq::backend::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace diffq::backend::cpu {

HWY_EXPORT(AddSquares);
HWY_EXPORT(ScaleRows);

namespace {

constexpr int64_t kBlock = 1024;  // pixels of one work item: C rows of it stay in L2

void channel_norm_kernel(const OpCall& c, Tensor& out) {
  const Tensor& x = c.inputs[0];
  const int64_t N = x.size(0), C = x.size(1), P = x.numel() / std::max<int64_t>(N * C, 1);
  std::optional<F32Input> w;
  if (c.inputs.size() > 1 && c.inputs[1].defined()) w.emplace(c.inputs[1]);
  const bool in_place = x.is_contiguous() && (x.dtype() == DType::f32 || x.dtype() == DType::bf16 ||
                                              x.dtype() == DType::f16);
  std::optional<F32Input> xin;
  if (!in_place) xin.emplace(x);  // other layouts: one contiguous f32 copy first
  const DType xt = in_place ? x.dtype() : DType::f32, ot = out.dtype();
  const int64_t xes = int64_t(dtype_size(xt)), oes = int64_t(dtype_size(ot));
  const uint8_t* xbytes = in_place ? elem_ptr(x, x.offset()) : reinterpret_cast<const uint8_t*>(xin->data());
  auto* obytes = static_cast<uint8_t*>(out.data_ptr());
  const float eps = float(c.attrs.f0), scale = float(c.attrs.f1);
  const bool silu = c.attrs.flag;
  const uint16_t* silu_table = silu && ot == DType::bf16 ? bf16_unary_table(ops::UnaryFn::silu) : nullptr;
  const int64_t blocks = (P + kBlock - 1) / kBlock;
  parallel_for(N * blocks, 1, [&](int64_t i0, int64_t i1) {
    thread_local std::vector<float> acc, row, y;
    acc.resize(size_t(kBlock)), row.resize(size_t(kBlock)), y.resize(size_t(kBlock));
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t n = i / blocks, p0 = (i % blocks) * kBlock, len = std::min(kBlock, P - p0);
      auto src = [&](int64_t ch) -> const float* {  // row ch of the block as f32
        const uint8_t* s = xbytes + ((n * C + ch) * P + p0) * xes;
        if (xt == DType::f32) return reinterpret_cast<const float*>(s);
        load_f32(s, xt, 1, row.data(), len);
        return row.data();
      };
      std::fill(acc.begin(), acc.begin() + len, 0.f);
      for (int64_t ch = 0; ch < C; ++ch) HWY_DYNAMIC_DISPATCH(AddSquares)(src(ch), acc.data(), len);
      for (int64_t k = 0; k < len; ++k) acc[size_t(k)] = 1.f / std::max(std::sqrt(acc[size_t(k)]), eps);
      for (int64_t ch = 0; ch < C; ++ch) {
        uint8_t* dst = obytes + ((n * C + ch) * P + p0) * oes;
        float* yr = ot == DType::f32 ? reinterpret_cast<float*>(dst) : y.data();
        HWY_DYNAMIC_DISPATCH(ScaleRows)(src(ch), acc.data(), scale, w ? w->data()[ch] : 1.f, yr, len,
                                        ot == DType::bf16);
        if (silu && ot == DType::bf16) {  // channel_norm_silu: silu of the norm rounded (by ScaleRows), by table
          store_f32(yr, dst, ot, len);
          bf16_table_row(silu_table, reinterpret_cast<uint16_t*>(dst), 1, reinterpret_cast<uint16_t*>(dst), len);
          continue;
        }
        if (silu) {  // channel_norm_silu: silu of the norm rounded to out's dtype
          if (ot != DType::f32) {
            store_f32(yr, dst, ot, len);
            load_f32(dst, ot, 1, yr, len);
          }
          unary_row_f32(ops::UnaryFn::silu, yr, yr, len);
        }
        if (ot != DType::f32) store_f32(yr, dst, ot, len);
      }
    }
  });
}

}  // namespace

void register_channel_norm_kernels() {
  ops::register_kernel(OpKind::channel_norm, DeviceKind::cpu, channel_norm_kernel);
}

}  // namespace diffq::backend::cpu
#endif  // HWY_ONCE
