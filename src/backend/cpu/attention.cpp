// Scaled dot-product attention on the CPU: a flash-attention style kernel (Highway, runtime dispatch).
//
// Work is split into tiles (batch, head, block of bq query rows) that the pool runs in parallel; a
// worker packs the K and V of the head it is on once (widened to f32 from any dtype, K transposed into
// panels of NR = 2 vectors of keys: [Sk/NR][D][NR]; V cut into panels of NR columns: [Dv/NR][Sk][NR],
// zero-padded) and keeps them while its tiles stay on that head. Per tile, Q's rows are packed in
// groups of MR = 6 ([D][6], pre-multiplied by scale * log2(e), so that the softmax is a power of 2)
// and K/V are visited in blocks of bk keys (online softmax):
//   1. S = Q K^T with a 6 x NR register-blocked micro-kernel (12 accumulators, D broadcast steps);
//   2. per row: the mask is added (x log2 e; f32 masks read in place), the block max taken, the row
//      max m and sum l updated, and P = 2^(S - m) written in place (a degree-6 polynomial, <= 1 ulp
//      on [-1/2, 1/2], scaled by 2^n built in the exponent bits; 2^x for x < -127 is 0, so masked
//      keys give exactly 0);
//   3. O = alpha O + P V with a 6 x NR micro-kernel (alpha = 2^(m_old - m_new) applied while loading
//      O's accumulators);
// and finally out = O / l, rounded to the output dtype (l = 0, a fully masked row: 0, as torch 2.15's
// CPU and CUDA sdpa; NaN scores still give NaN).
// Tile sizes are current_tuning().attn_bq / attn_bk, rounded up to multiples of 6 and NR. Results
// depend on the tiling only, never on the thread count. Buffers are per pool thread and kept between
// calls (for FLUX.1-dev's 4608 keys x D 128: ~5 MiB a thread). With D = 64 ~85% of the time is in the
// two micro-kernels, ~8% in the exponentials. The f64 scalar reference is
// reference::sdpa (src/backend/reference/reference_ops.cpp); tests/ops/test_sdpa_kernel.cpp compares.
#include "backend/cpu/hwy_config.h"
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backend/cpu/attention.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/attention_bf16_dot.h"
#include "backend/cpu/attention_amx.h"
#include "backend/cpu/attention_onednn.h"
#include "backend/cpu/attention_tiles.h"
#include "backend/cpu/common.h"
#include "backend/cpu/bf16_dot_gemm.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/onednn_gemm.h"
#include "backend/cpu/simd-inl.h"
#include "backend/cpu/strided.h"
#include "backend/cpu/threads.h"
#include "backend/cpu/tuning.h"

HWY_BEFORE_NAMESPACE();
namespace diffq::backend::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

constexpr int64_t kMR = kAttentionRows;  // query rows per micro-kernel (12 accumulators of 16 registers)

// 2^x for x <= 0 (NaN stays NaN on x86): x = n + f, |f| <= 1/2; 2^f by a degree-6 polynomial (fitted
// for minimax relative error, p(0) = 1) times 2^n made from n's bits. x < -126.5 gives 0.
template <class D, class V = hn::Vec<D>>
HWY_INLINE V Exp2NonPositive(D d, V x) {
  const hn::RebindToSigned<D> di;
  x = hn::Max(hn::Set(d, -127.0f), x);
  // x + 1.5 * 2^23 + 127 rounds to an integer whose low mantissa bits are n + 127.
  const V magic = hn::Set(d, 12582912.0f + 127.0f);
  const V t = hn::Add(x, magic);
  const V f = hn::Sub(x, hn::Sub(t, magic));
  const V two_n = hn::BitCast(d, hn::ShiftLeft<23>(hn::BitCast(di, t)));  // 0 for n = -127
  V p = hn::Set(d, 1.5353361959569156e-4f);
  p = hn::MulAdd(p, f, hn::Set(d, 1.3398875016719103e-3f));
  p = hn::MulAdd(p, f, hn::Set(d, 9.61843691766262e-3f));
  p = hn::MulAdd(p, f, hn::Set(d, 5.5503323674201965e-2f));
  p = hn::MulAdd(p, f, hn::Set(d, 0.24022647738456726f));
  p = hn::MulAdd(p, f, hn::Set(d, 0.6931471824645996f));
  p = hn::MulAdd(p, f, hn::Set(d, 1.0f));
  return hn::Mul(p, two_n);
}

void Exp2ForTest(const float* x, float* y, int64_t n) {
  MapF32(x, y, n, [](auto d, auto v) { return Exp2NonPositive(d, v); });
}

// s[6, 2N] (row stride lds) = qp[depth][6]^T-broadcast x kp[depth][2N].
template <class D>
HWY_INLINE void QKMicro(D d, const float* HWY_RESTRICT qp, const float* HWY_RESTRICT kp, int64_t depth,
                        float* HWY_RESTRICT s, int64_t lds) {
  using V = hn::Vec<D>;
  const size_t N = hn::Lanes(d);
  V c00 = hn::Zero(d), c01 = hn::Zero(d), c10 = hn::Zero(d), c11 = hn::Zero(d);
  V c20 = hn::Zero(d), c21 = hn::Zero(d), c30 = hn::Zero(d), c31 = hn::Zero(d);
  V c40 = hn::Zero(d), c41 = hn::Zero(d), c50 = hn::Zero(d), c51 = hn::Zero(d);
  for (int64_t e = 0; e < depth; ++e, qp += kMR, kp += 2 * N) {
    const V b0 = hn::Load(d, kp), b1 = hn::Load(d, kp + N);
    V a = hn::Set(d, qp[0]);
    c00 = hn::MulAdd(a, b0, c00);
    c01 = hn::MulAdd(a, b1, c01);
    a = hn::Set(d, qp[1]);
    c10 = hn::MulAdd(a, b0, c10);
    c11 = hn::MulAdd(a, b1, c11);
    a = hn::Set(d, qp[2]);
    c20 = hn::MulAdd(a, b0, c20);
    c21 = hn::MulAdd(a, b1, c21);
    a = hn::Set(d, qp[3]);
    c30 = hn::MulAdd(a, b0, c30);
    c31 = hn::MulAdd(a, b1, c31);
    a = hn::Set(d, qp[4]);
    c40 = hn::MulAdd(a, b0, c40);
    c41 = hn::MulAdd(a, b1, c41);
    a = hn::Set(d, qp[5]);
    c50 = hn::MulAdd(a, b0, c50);
    c51 = hn::MulAdd(a, b1, c51);
  }
  hn::Store(c00, d, s), hn::Store(c01, d, s + N), s += lds;
  hn::Store(c10, d, s), hn::Store(c11, d, s + N), s += lds;
  hn::Store(c20, d, s), hn::Store(c21, d, s + N), s += lds;
  hn::Store(c30, d, s), hn::Store(c31, d, s + N), s += lds;
  hn::Store(c40, d, s), hn::Store(c41, d, s + N), s += lds;
  hn::Store(c50, d, s), hn::Store(c51, d, s + N);
}

// o[6, 2N] (row stride ldo) = alpha[r] * o (0 when alpha is null) + p[6, n] (row stride ldp) x
// vp[n][2N].
template <class D>
HWY_INLINE void PVMicro(D d, const float* HWY_RESTRICT p, int64_t ldp, const float* HWY_RESTRICT vp,
                        int64_t n, float* HWY_RESTRICT o, int64_t ldo, const float* alpha) {
  using V = hn::Vec<D>;
  const size_t N = hn::Lanes(d);
  V c00 = hn::Zero(d), c01 = hn::Zero(d), c10 = hn::Zero(d), c11 = hn::Zero(d);
  V c20 = hn::Zero(d), c21 = hn::Zero(d), c30 = hn::Zero(d), c31 = hn::Zero(d);
  V c40 = hn::Zero(d), c41 = hn::Zero(d), c50 = hn::Zero(d), c51 = hn::Zero(d);
  if (alpha) {
    const float* r = o;
    V a = hn::Set(d, alpha[0]);
    c00 = hn::Mul(a, hn::Load(d, r)), c01 = hn::Mul(a, hn::Load(d, r + N)), r += ldo;
    a = hn::Set(d, alpha[1]);
    c10 = hn::Mul(a, hn::Load(d, r)), c11 = hn::Mul(a, hn::Load(d, r + N)), r += ldo;
    a = hn::Set(d, alpha[2]);
    c20 = hn::Mul(a, hn::Load(d, r)), c21 = hn::Mul(a, hn::Load(d, r + N)), r += ldo;
    a = hn::Set(d, alpha[3]);
    c30 = hn::Mul(a, hn::Load(d, r)), c31 = hn::Mul(a, hn::Load(d, r + N)), r += ldo;
    a = hn::Set(d, alpha[4]);
    c40 = hn::Mul(a, hn::Load(d, r)), c41 = hn::Mul(a, hn::Load(d, r + N)), r += ldo;
    a = hn::Set(d, alpha[5]);
    c50 = hn::Mul(a, hn::Load(d, r)), c51 = hn::Mul(a, hn::Load(d, r + N));
  }
  const float *p0 = p, *p1 = p + ldp, *p2 = p + 2 * ldp, *p3 = p + 3 * ldp, *p4 = p + 4 * ldp,
              *p5 = p + 5 * ldp;
  for (int64_t j = 0; j < n; ++j, vp += 2 * N) {
    const V b0 = hn::Load(d, vp), b1 = hn::Load(d, vp + N);
    V a = hn::Set(d, p0[j]);
    c00 = hn::MulAdd(a, b0, c00);
    c01 = hn::MulAdd(a, b1, c01);
    a = hn::Set(d, p1[j]);
    c10 = hn::MulAdd(a, b0, c10);
    c11 = hn::MulAdd(a, b1, c11);
    a = hn::Set(d, p2[j]);
    c20 = hn::MulAdd(a, b0, c20);
    c21 = hn::MulAdd(a, b1, c21);
    a = hn::Set(d, p3[j]);
    c30 = hn::MulAdd(a, b0, c30);
    c31 = hn::MulAdd(a, b1, c31);
    a = hn::Set(d, p4[j]);
    c40 = hn::MulAdd(a, b0, c40);
    c41 = hn::MulAdd(a, b1, c41);
    a = hn::Set(d, p5[j]);
    c50 = hn::MulAdd(a, b0, c50);
    c51 = hn::MulAdd(a, b1, c51);
  }
  hn::Store(c00, d, o), hn::Store(c01, d, o + N), o += ldo;
  hn::Store(c10, d, o), hn::Store(c11, d, o + N), o += ldo;
  hn::Store(c20, d, o), hn::Store(c21, d, o + N), o += ldo;
  hn::Store(c30, d, o), hn::Store(c31, d, o + N), o += ldo;
  hn::Store(c40, d, o), hn::Store(c41, d, o + N), o += ldo;
  hn::Store(c50, d, o), hn::Store(c51, d, o + N);
}

// s[0, n) += add * log2(e) (when given); returns the max of s[0, n). s is readable up to n rounded up
// to Lanes.
template <class D>
HWY_INLINE float RowMax(D d, float* HWY_RESTRICT s, int64_t n, const float* HWY_RESTRICT add) {
  using V = hn::Vec<D>;
  const int64_t N = int64_t(hn::Lanes(d));
  V m0 = hn::Set(d, -INFINITY), m1 = m0;
  int64_t j = 0;
  if (add) {
    const V log2e = hn::Set(d, float(M_LOG2E));
    for (; j + N <= n; j += N) {
      const V v = hn::MulAdd(hn::LoadU(d, add + j), log2e, hn::Load(d, s + j));
      hn::Store(v, d, s + j);
      m0 = hn::Max(m0, v);
    }
    for (; j < n; ++j) s[j] = std::fma(add[j], float(M_LOG2E), s[j]), m1 = hn::Max(m1, hn::Set(d, s[j]));
    return MaxLanes(d, hn::Max(m0, m1));
  }
  for (; j + 2 * N <= n; j += 2 * N) {
    m0 = hn::Max(m0, hn::Load(d, s + j));
    m1 = hn::Max(m1, hn::Load(d, s + j + N));
  }
  if (j < n) {
    const auto valid = hn::FirstN(d, size_t(std::min(N, n - j)));
    m0 = hn::Max(m0, hn::IfThenElse(valid, hn::Load(d, s + j), hn::Set(d, -INFINITY)));
    j += N;
  }
  if (j < n) {
    const auto valid = hn::FirstN(d, size_t(n - j));
    m1 = hn::Max(m1, hn::IfThenElse(valid, hn::Load(d, s + j), hn::Set(d, -INFINITY)));
  }
  return MaxLanes(d, hn::Max(m0, m1));
}

// s[0, n) = 2^(s - m); returns their sum. s is writable up to n rounded up to Lanes. (One vector per
// step: unrolled twice, the polynomial's constants and two sums no longer fit in 16 registers.)
template <class D>
HWY_INLINE float RowExp2(D d, float* HWY_RESTRICT s, int64_t n, float m) {
  using V = hn::Vec<D>;
  const int64_t N = int64_t(hn::Lanes(d));
  const V vm = hn::Set(d, m);
  V acc = hn::Zero(d);
  int64_t j = 0;
  for (; j + N <= n; j += N) {
    const V e = Exp2NonPositive(d, hn::Sub(hn::Load(d, s + j), vm));
    hn::Store(e, d, s + j);
    acc = hn::Add(acc, e);
  }
  if (j < n) {
    const auto valid = hn::FirstN(d, size_t(n - j));
    const V e = hn::IfThenElseZero(valid, Exp2NonPositive(d, hn::Sub(hn::Load(d, s + j), vm)));
    hn::Store(e, d, s + j);
    acc = hn::Add(acc, e);
  }
  return SumLanes(d, acc);
}

// Row (b, h, r) of `t` ([B, H, S, cols]) as f32: a pointer into t when it is f32 with unit column
// stride, else converted into tmp.
HWY_INLINE const float* HeadRow(const AttentionOperand& t, int64_t b, int64_t h, int64_t r, int64_t cols,
                                float* tmp) {
  const uint8_t* src = t.at(b, h, r, 0);
  if (t.dtype == DType::f32 && (t.st[3] == 1 || cols == 1)) return reinterpret_cast<const float*>(src);
  load_f32(src, t.dtype, t.st[3], tmp, cols);
  return tmp;
}

// Per-thread buffers, kept between calls.
struct TileScratch {
  AlignedScratch kp, vp, qp, s, o, row, mask, stats;
};

void AttentionTiles(const AttentionProblem& p, int64_t t0, int64_t t1) {
  const hn::ScalableTag<float> d;
  const int64_t N = int64_t(hn::Lanes(d)), NR = 2 * N;
  const int64_t D = p.D, Dv = p.Dv, Sk = p.Sk, Sq = p.Sq;
  const int64_t k_panels = (Sk + NR - 1) / NR, v_panels = (Dv + NR - 1) / NR, ldo = v_panels * NR;
  const int64_t bq_pad = (std::min(p.bq, Sq) + kMR - 1) / kMR * kMR;
  // Keys per block: a whole number of K panels, at most all of them.
  const int64_t kb =
      std::min((std::max<int64_t>(p.bk, 1) + NR - 1) / NR, std::max<int64_t>(k_panels, 1)) * NR;

  thread_local TileScratch scratch;
  float* const kp = scratch.kp.get(size_t(std::max<int64_t>(k_panels * NR * D, 1)));
  float* const vp = scratch.vp.get(size_t(std::max<int64_t>(v_panels * Sk * NR, 1)));
  float* const qp = scratch.qp.get(size_t(std::max<int64_t>(bq_pad * D, 1)));
  float* const s = scratch.s.get(size_t(bq_pad * kb));
  float* const o = scratch.o.get(size_t(std::max<int64_t>(bq_pad * ldo, 1)));
  float* const tmp = scratch.row.get(size_t(std::max({NR * D, Dv, int64_t(1)})));
  float* const mrow = scratch.mask.get(size_t(kb));
  float* const stats = scratch.stats.get(size_t(3 * bq_pad));
  float *const m = stats, *const l = stats + bq_pad, *const alpha = stats + 2 * bq_pad;

  int64_t bound = -1;
  for (int64_t t = t0; t < t1; ++t) {
    const int64_t bh = t / p.q_blocks, b = bh / p.H, h = bh % p.H, i0 = (t % p.q_blocks) * p.bq;
    if (bh != bound) {
      // K^T in panels of NR keys: kp[panel][e][jj] = K[panel * NR + jj][e] (0 past Sk).
      for (int64_t pj = 0; pj < k_panels; ++pj) {
        float* dstp = kp + pj * D * NR;
        for (int64_t jj = 0; jj < NR; ++jj) {
          const int64_t j = pj * NR + jj;
          if (j < Sk && D > 0) {
            const float* row = HeadRow(p.k, b, h, j, D, tmp + jj * D);
            for (int64_t e = 0; e < D; ++e) dstp[e * NR + jj] = row[e];
          } else {
            for (int64_t e = 0; e < D; ++e) dstp[e * NR + jj] = 0.f;
          }
        }
      }
      // V in panels of NR columns: vp[panel][j][c] = V[j][panel * NR + c] (0 past Dv).
      for (int64_t j = 0; j < Sk && Dv > 0; ++j) {
        const float* row = HeadRow(p.v, b, h, j, Dv, tmp);
        for (int64_t pe = 0; pe < v_panels; ++pe) {
          float* dstp = vp + (pe * Sk + j) * NR;
          const int64_t c = std::min(NR, Dv - pe * NR);
          std::memcpy(dstp, row + pe * NR, size_t(c) * sizeof(float));
          std::fill(dstp + c, dstp + NR, 0.f);
        }
      }
      bound = bh;
    }
    const int64_t rows = std::min(p.bq, Sq - i0), groups = (rows + kMR - 1) / kMR;
    const int64_t rows_pad = groups * kMR;
    // Q rows x scale*log2(e) in groups of kMR: qp[g][e][r] (0 for the rows past `rows`).
    for (int64_t r = 0; r < rows_pad; ++r) {
      float* dstp = qp + (r / kMR) * D * kMR + r % kMR;
      if (r < rows && D > 0) {
        const float* row = HeadRow(p.q, b, h, i0 + r, D, tmp);
        for (int64_t e = 0; e < D; ++e) dstp[e * kMR] = row[e] * p.scale_log2e;
      } else {
        for (int64_t e = 0; e < D; ++e) dstp[e * kMR] = 0.f;
      }
    }
    for (int64_t r = 0; r < rows_pad; ++r) m[r] = -INFINITY, l[r] = 0.f;
    if (Sk == 0) std::fill(o, o + rows_pad * ldo, 0.f);

    for (int64_t j0 = 0; j0 < Sk; j0 += kb) {
      const int64_t n = std::min(kb, Sk - j0), n_panels = (n + NR - 1) / NR;
      // 1. S = Q K^T (scaled, base 2) for keys [j0, j0 + n), row stride kb.
      for (int64_t pj = 0; pj < n_panels; ++pj) {
        const float* kpan = kp + (j0 / NR + pj) * D * NR;
        for (int64_t g = 0; g < groups; ++g)
          QKMicro(d, qp + g * D * kMR, kpan, D, s + g * kMR * kb + pj * NR, kb);
      }
      // 2. Online softmax: P = 2^(S - m_new) in place, l and alpha per row.
      for (int64_t r = 0; r < rows_pad; ++r) {
        float* srow = s + r * kb;
        const float* add = r < rows ? attention_mask_row(p, b, h, i0 + r, j0, n, mrow) : nullptr;
        const float m_new = std::max(m[r], RowMax(d, srow, n, add));
        if (m_new == -INFINITY) {  // nothing attended in this row yet: P = 0, O stays 0
          std::fill(srow, srow + n, 0.f);
          alpha[r] = 1.f;
          continue;
        }
        alpha[r] = m[r] == -INFINITY ? 0.f : std::exp2(m[r] - m_new);
        l[r] = l[r] * alpha[r] + RowExp2(d, srow, n, m_new);
        m[r] = m_new;
      }
      // 3. O = alpha O + P V.
      for (int64_t pe = 0; pe < v_panels; ++pe) {
        const float* vpan = vp + (pe * Sk + j0) * NR;
        for (int64_t g = 0; g < groups; ++g)
          PVMicro(d, s + g * kMR * kb, kb, vpan, n, o + g * kMR * ldo + pe * NR, ldo,
                  j0 == 0 ? nullptr : alpha + g * kMR);
      }
    }
    // out = O / l in the output dtype. l = 0 only when every key of the row is masked (a row with a
    // finite max has a term 2^0 = 1): torch returns 0 there, not 0 * inf = NaN.
    const int64_t pos0 = (b * p.H + h) * Sq + i0;
    for (int64_t r = 0; r < rows; ++r) attention_store_row(p, pos0 + r, o + r * ldo, l[r]);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace diffq::backend::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace diffq::backend::cpu {

HWY_EXPORT(AttentionTiles);
HWY_EXPORT(Exp2ForTest);

const float* attention_mask_row(const AttentionProblem& p, int64_t b, int64_t h, int64_t i, int64_t j0, int64_t n,
                                float* tmp) {
  if (!p.mask.base || i >= p.Sq) return nullptr;
  const uint8_t* src = p.mask.at(b, h, i, j0);
  if (p.mask.dtype == DType::f32 && p.mask.st[3] == 1) return reinterpret_cast<const float*>(src);
  load_f32(src, p.mask.dtype, p.mask.st[3], tmp, n);
  if (p.bool_mask)
    for (int64_t j = 0; j < n; ++j) tmp[j] = tmp[j] != 0.f ? 0.f : -INFINITY;
  return tmp;
}

void attention_store_row(const AttentionProblem& p, int64_t pos, float* orow, float l) {
  const float inv = l == 0.f ? 0.f : 1.f / l;
  for (int64_t c = 0; c < p.Dv; ++c) orow[c] *= inv;
  store_f32(orow, p.dst + pos * p.Dv * int64_t(dtype_size(p.out_dtype)), p.out_dtype, p.Dv);
}

bool attention_onednn_by_default() {
  static const bool yes = attention_onednn_usable() && onednn_bf16_uses_amx();
  return yes;
}

AttentionKernel attention_kernel_for(const AttentionProblem& p, const Tuning& t) {
  const bool bf16 = p.q.dtype == DType::bf16 && p.k.dtype == DType::bf16 && p.v.dtype == DType::bf16 && p.q.base &&
                    p.k.base && p.v.base;
  if (!bf16 || t.attention_kernel == AttentionKernel::f32) return AttentionKernel::f32;
  if (t.attention_kernel == AttentionKernel::amx && attention_amx_usable()) return AttentionKernel::amx;
  if (t.attention_kernel == AttentionKernel::onednn && attention_onednn_usable()) return AttentionKernel::onednn;
  if (t.attention_kernel == AttentionKernel::bf16_dot && bf16_dot_gemm_usable()) return AttentionKernel::bf16_dot;
  // best, where oneDNN's bf16 matmul runs on AMX (not under DNNL_MAX_CPU_ISA below AMX): the AMX tiles where
  // this process may use AMX, else the oneDNN tiles (docs/benchmarks.md "Ninth AMX session").
  if (t.attention_kernel == AttentionKernel::best && t.gemm_kernel != GemmKernel::diffq_widen &&
      attention_onednn_by_default())
    return attention_amx_usable() ? AttentionKernel::amx : AttentionKernel::onednn;
  return attention_bf16_dot_applies(p, t) ? AttentionKernel::bf16_dot : AttentionKernel::f32;
}

std::string attention_kernel_name(const Tuning& t) {
  AttentionProblem bf16;
  bf16.q.dtype = bf16.k.dtype = bf16.v.dtype = DType::bf16;
  static const uint8_t some = 0;
  bf16.q.base = bf16.k.base = bf16.v.base = &some;
  switch (attention_kernel_for(bf16, t)) {
    case AttentionKernel::onednn:
      return "bf16 inputs: Q K^T and P V blocks on oneDNN's bf16 matmul (" + onednn_bf16_impl() +
             "; P in bf16), others f32 tiles";
    case AttentionKernel::amx: return "bf16 inputs: Q K^T and P V blocks on AMX tiles (P in bf16), others f32 tiles";
    case AttentionKernel::bf16_dot: return "bf16 inputs on vdpbf16ps pairs (P in bf16), others f32 tiles";
    default: return "f32 tiles";
  }
}

void attention_exp2_for_test(const float* x, float* y, int64_t n) {
  HWY_DYNAMIC_DISPATCH(Exp2ForTest)(x, y, n);
}

namespace {

AttentionOperand operand(const Tensor& t, const Shape& strides) {
  AttentionOperand o;
  if (!t.defined() || t.numel() == 0) return o;  // nothing is read from an empty operand
  o.dtype = t.dtype();
  o.esize = int64_t(dtype_size(t.dtype()));
  o.base = elem_ptr(t, t.offset());
  for (int i = 0; i < 4; ++i) o.st[i] = strides[size_t(i)];
  return o;
}

void sdpa_kernel(const OpCall& c, Tensor& out) {
  const Tensor &q = c.inputs[0], &k = c.inputs[1], &v = c.inputs[2];
  const Tensor mask = c.inputs.size() > 3 ? c.inputs[3] : Tensor();
  AttentionProblem p;
  p.B = q.size(0), p.H = q.size(1), p.Sq = q.size(2), p.D = q.size(3);
  p.Sk = k.size(2), p.Dv = v.size(3);
  p.q = operand(q, q.strides()), p.k = operand(k, k.strides()), p.v = operand(v, v.strides());
  if (mask.defined()) p.mask = operand(mask, broadcast_strides(mask, {p.B, p.H, p.Sq, p.Sk}));
  const double scale = c.attrs.f0 > 0 ? c.attrs.f0 : 1.0 / std::sqrt(double(p.D));
  p.scale_log2e = float(scale * M_LOG2E);
  p.bool_mask = mask.defined() && mask.dtype() == DType::boolean;
  const Tuning& tune = current_tuning();
  p.bq = (std::max<int64_t>(1, tune.attn_bq) + kAttentionRows - 1) / kAttentionRows * kAttentionRows;
  p.bk = std::max<int64_t>(1, tune.attn_bk);
  p.q_blocks = (p.Sq + p.bq - 1) / p.bq;
  p.pack_kv = tune.weight_packing != WeightPacking::off;
  p.dst = static_cast<uint8_t*>(out.data_ptr());
  p.out_dtype = out.dtype();
  if (p.D == 0 && !std::isfinite(p.scale_log2e)) {  // empty heads, scale 1/sqrt(0): 0 * inf = NaN scores
    const std::vector<float> nan(size_t(p.Dv), NAN);
    const int64_t oes = int64_t(dtype_size(p.out_dtype));
    for (int64_t r = 0; r < p.B * p.H * p.Sq; ++r)
      store_f32(nan.data(), p.dst + r * p.Dv * oes, p.out_dtype, p.Dv);
    return;
  }
  // bf16 inputs on oneDNN's matmul where it runs on AMX (attention_onednn.h), else on the CPU's bf16
  // dot product where it has one (as PyTorch's bf16 flash attention: attention_bf16_dot.h);
  // DIFFQ_ATTENTION_KERNEL forces one (tuning.h), DIFFQ_GEMM_KERNEL=diffq-widen the f32 tiles by default.
  const AttentionKernel kernel = attention_kernel_for(p, tune);
  // Tiles are independent: the pool takes them in contiguous runs, each worker with its own buffers.
  parallel_for(p.B * p.H * p.q_blocks, 1, [&](int64_t t0, int64_t t1) {
    if (kernel == AttentionKernel::amx)
      attention_tiles_amx(p, t0, t1);
    else if (kernel == AttentionKernel::onednn)
      attention_tiles_onednn(p, t0, t1);
    else if (kernel == AttentionKernel::bf16_dot)
      attention_tiles_bf16_dot(p, t0, t1);
    else
      HWY_DYNAMIC_DISPATCH(AttentionTiles)(p, t0, t1);
  });
}

}  // namespace

void register_attention_kernels() { ops::register_kernel(OpKind::sdpa, DeviceKind::cpu, sdpa_kernel); }

}  // namespace diffq::backend::cpu
#endif  // HWY_ONCE
