// Scaled dot-product attention as a tiled online softmax (flash-attention style): per (batch, head)
// and block of kBq query rows, K/V are visited in blocks of kBk keys; S = Q K^T of the block comes from
// sgemm, the running row max m and sum l are updated, the O accumulator is rescaled and O += P V is
// another sgemm. Memory is O(kBq * kBk + S * D): the Sq x Sk matrix never exists.
#include "backend/cpu/hwy_config.h"
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backend/cpu/attention.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>

#include <cmath>

#include "backend/cpu/common.h"
#include "backend/cpu/gemm.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/simd-inl.h"
#include "backend/cpu/strided.h"
#include "backend/cpu/tuning.h"
#include "backend/cpu/threads.h"
#include "backend/cpu/tuning.h"

HWY_BEFORE_NAMESPACE();
namespace diffq::backend::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// s = s * scale (+ add); m_new = max(m_old, s); s = exp(s - m_new) in place (0 when m_new = -inf).
// Returns m_new and writes the sum of the new s to *sum.
float OnlineSoftmaxRow(float* s, int64_t n, float scale, const float* add, float m_old, float* sum) {
  const hn::ScalableTag<float> d;
  const int64_t N = int64_t(hn::Lanes(d));
  const auto vscale = hn::Set(d, scale);
  auto vmax = hn::Set(d, -INFINITY);
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    auto v = hn::Mul(hn::LoadU(d, s + i), vscale);
    if (add) v = hn::Add(v, hn::LoadU(d, add + i));
    hn::StoreU(v, d, s + i);
    vmax = hn::Max(vmax, v);
  }
  float m = std::max(m_old, MaxLanes(d, vmax));
  for (; i < n; ++i) {
    s[i] = s[i] * scale + (add ? add[i] : 0.f);
    m = std::max(m, s[i]);
  }
  if (m == -INFINITY) {
    for (int64_t j = 0; j < n; ++j) s[j] = 0.f;
    *sum = 0.f;
    return m;
  }
  const auto vm = hn::Set(d, m);
  auto acc = hn::Zero(d);
  i = 0;
  for (; i + N <= n; i += N) {
    const auto e = hn::Exp(d, hn::Sub(hn::LoadU(d, s + i), vm));
    acc = hn::Add(acc, e);
    hn::StoreU(e, d, s + i);
  }
  float total = SumLanes(d, acc);
  for (; i < n; ++i) total += (s[i] = std::exp(s[i] - m));
  *sum = total;
  return m;
}

void ScaleRow(float* x, int64_t n, float a) {
  const hn::ScalableTag<float> d;
  const auto va = hn::Set(d, a);
  MapF32(x, x, n, [&](auto, auto v) { return hn::Mul(v, va); });
}

}  // namespace HWY_NAMESPACE
}  // namespace diffq::backend::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace diffq::backend::cpu {

HWY_EXPORT(OnlineSoftmaxRow);
HWY_EXPORT(ScaleRow);

namespace {

// Tiles: current_tuning().attn_bq query rows x attn_bk keys (defaults 128 x 2048: one pass over K/V
// for sequences up to 2048, so no rescaling of O). Measured on the 2-core EPYC (docs/benchmarks.md
// "FLUX on the CPU"): 128 x 256, 64 x 512, 32/64/256 x 2048 were all within noise of the default; the
// gain is from running tiles in parallel.

// One head's [rows, cols] matrix of a [B, H, S, D] tensor as f32 with row stride ld: in place when
// it is f32 with unit column stride, else gathered into `buf`.
struct HeadMatrix {
  const float* p = nullptr;
  int64_t ld = 0;
  std::unique_ptr<float[]> buf;

  void bind(const Tensor& t, int64_t b, int64_t h) {
    const int64_t rows = t.size(2), cols = t.size(3);
    const auto& st = t.strides();
    const int64_t off = t.offset() + b * st[0] + h * st[1];
    if (t.dtype() == DType::f32 && (st[3] == 1 || cols == 1) && (st[2] >= cols || rows == 1)) {
      p = reinterpret_cast<const float*>(elem_ptr(t, off));
      ld = rows == 1 ? cols : st[2];
      return;
    }
    if (!buf) buf = alloc_f32(rows * cols);
    parallel_for(rows, std::max<int64_t>(1, 8192 / cols), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r)
        load_f32(elem_ptr(t, off + r * st[2]), t.dtype(), st[3], buf.get() + r * cols, cols);
    });
    p = buf.get();
    ld = cols;
  }
};

void sdpa_kernel(const OpCall& c, Tensor& out) {
  const Tensor &q = c.inputs[0], &k = c.inputs[1], &v = c.inputs[2];
  const Tensor mask = c.inputs.size() > 3 ? c.inputs[3] : Tensor();
  const int64_t B = q.size(0), H = q.size(1), Sq = q.size(2), D = q.size(3);
  const int64_t Sk = k.size(2), Dv = v.size(3);
  const float scale = float(c.attrs.f0 > 0 ? c.attrs.f0 : 1.0 / std::sqrt(double(D)));
  const bool bool_mask = mask.defined() && mask.dtype() == DType::boolean;
  const Shape mstrides = mask.defined() ? broadcast_strides(mask, {B, H, Sq, Sk}) : Shape(4, 0);

  const DType ot = out.dtype();
  const int64_t oes = int64_t(dtype_size(ot));
  auto* dst = static_cast<uint8_t*>(out.data_ptr());
  const Tuning& tune = current_tuning();
  const int64_t kBq = std::max<int64_t>(1, tune.attn_bq), kBk = std::max<int64_t>(1, tune.attn_bk);
  const int64_t bq_max = std::min(kBq, Sq), bk_max = std::min(kBk, Sk);
  const int64_t q_blocks = (Sq + kBq - 1) / kBq;

  // Tiles (batch, head, block of query rows) are independent: the pool takes them in contiguous runs,
  // each worker with its own buffers (a nested parallel_for or sgemm runs inline on that worker).
  parallel_for(B * H * q_blocks, 1, [&](int64_t t0, int64_t t1) {
    auto S = alloc_f32(bq_max * bk_max), O = alloc_f32(bq_max * Dv);
    auto M = alloc_f32(bq_max), L = alloc_f32(bq_max);
    auto mask_buf = alloc_f32(mask.defined() ? bq_max * bk_max : 1);
    HeadMatrix Q, K, V;
    int64_t bound = -1;
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t bh = t / q_blocks, b = bh / H, h = bh % H, i0 = (t % q_blocks) * kBq;
      if (bh != bound) {
        Q.bind(q, b, h);
        K.bind(k, b, h);
        V.bind(v, b, h);
        bound = bh;
      }
      const int64_t bq = std::min(kBq, Sq - i0);
      for (int64_t i = 0; i < bq; ++i) {
        M[i] = -INFINITY;
        L[i] = 0.f;
      }
      std::fill(O.get(), O.get() + bq * Dv, 0.f);
      for (int64_t j0 = 0; j0 < Sk; j0 += kBk) {
        const int64_t bk = std::min(kBk, Sk - j0);
        // S[bq, bk] = Q[i0:, :] @ K[j0:, :]^T
        if (D > 0) {
          sgemm(false, true, bq, bk, D, 1.f, Q.p + i0 * Q.ld, Q.ld, K.p + j0 * K.ld, K.ld, 0.f, S.get(), bk);
        } else {
          std::fill(S.get(), S.get() + bq * bk, 0.f);
        }
        parallel_for(bq, std::max<int64_t>(1, 4096 / bk), [&](int64_t r0, int64_t r1) {
          for (int64_t i = r0; i < r1; ++i) {
            const float* add = nullptr;
            if (mask.defined()) {
              float* mrow = mask_buf.get() + i * bk;
              const int64_t mo = mask.offset() + b * mstrides[0] + h * mstrides[1] +
                                 (i0 + i) * mstrides[2] + j0 * mstrides[3];
              load_f32(elem_ptr(mask, mo), mask.dtype(), mstrides[3], mrow, bk);
              if (bool_mask)
                for (int64_t j = 0; j < bk; ++j) mrow[j] = mrow[j] != 0.f ? 0.f : -INFINITY;
              add = mrow;
            }
            float sum = 0.f;
            const float m_old = M[i];
            const float m_new = HWY_DYNAMIC_DISPATCH(OnlineSoftmaxRow)(S.get() + i * bk, bk, scale, add, m_old, &sum);
            if (m_new == -INFINITY) continue;  // nothing attended yet in this row
            const float alpha = m_old == -INFINITY ? 0.f : std::exp(m_old - m_new);
            M[i] = m_new;
            L[i] = L[i] * alpha + sum;
            if (alpha != 1.f) HWY_DYNAMIC_DISPATCH(ScaleRow)(O.get() + i * Dv, Dv, alpha);
          }
        });
        // O[bq, Dv] += P[bq, bk] @ V[j0:, :]
        sgemm(false, false, bq, Dv, bk, 1.f, S.get(), bk, V.p + j0 * V.ld, V.ld, 1.f, O.get(), Dv);
      }
      // out = O / l, rounded to the output dtype.
      parallel_for(bq, std::max<int64_t>(1, 4096 / std::max<int64_t>(Dv, 1)), [&](int64_t r0, int64_t r1) {
        for (int64_t i = r0; i < r1; ++i) {
          float* row = O.get() + i * Dv;
          HWY_DYNAMIC_DISPATCH(ScaleRow)(row, Dv, 1.f / L[i]);  // l = 0 (all masked): NaN, as torch
          const int64_t o = ((b * H + h) * Sq + i0 + i) * Dv;
          store_f32(row, dst + o * oes, ot, Dv);
        }
      });
    }
  });
}

}  // namespace

void register_attention_kernels() { ops::register_kernel(OpKind::sdpa, DeviceKind::cpu, sdpa_kernel); }

}  // namespace diffq::backend::cpu
#endif  // HWY_ONCE
