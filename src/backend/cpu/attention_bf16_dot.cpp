// bf16 attention tiles on vdpbf16ps (see attention_bf16_dot.h). Per worker and head: K packed into
// panels of 32 keys of head-dim pairs (kp[panel][e / 2][key]), V into panels of 32 columns of key pairs
// (vp[panel][j / 2][col]); per tile, Q's rows in groups of 6 as head-dim pairs (qp[group][e / 2][row]).
// Per block of keys: S = Q K^T (6 x 64 register tile over two panels, 24 accumulators; 6 x 32 for a last
// odd panel), S *= scale * log2(e) (+ mask),
// the online softmax in f32 with the f32 tiles' base-2 exponential (same polynomial, same bits), P
// rounded to bf16 (vcvtne2ps2bf16, round to nearest even), O = alpha O + P V (6 x 64 / 6 x 32 tiles
// over key pairs). Compiled for AVX512-BF16 with function target attributes; only run where it applies.
#include "backend/cpu/attention_bf16_dot.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/cpu/aligned_buffer.h"
#include "backend/cpu/bf16_dot_gemm.h"
#include "backend/cpu/bf16_dot_target.h"
#include "backend/cpu/common.h"
#include "backend/cpu/tuning.h"


namespace diffq::backend::cpu {

namespace {

constexpr int64_t kMR = kAttentionRows;  // query rows per micro-tile
constexpr int64_t kNR = 32;              // keys (S) / value columns (O) per micro-tile: two vectors

struct Scratch {
  AlignedBuffer<uint32_t> kp, vp, qp, pb;
  AlignedBuffer<float> s, o, mrow, stats;
};

// Element c of a [.., cols] row of bf16 bits with column stride st.
inline uint16_t at(const uint16_t* row, int64_t st, int64_t c) { return row[c * st]; }
inline uint32_t pair(uint16_t lo, uint16_t hi) { return uint32_t(lo) | (uint32_t(hi) << 16); }
// Head-dim pair e of a row of D elements: (row[2e], row[2e + 1]), 0 past D.
inline uint32_t head_pair(const uint16_t* row, int64_t st, int64_t e, int64_t D) {
  return pair(at(row, st, 2 * e), 2 * e + 1 < D ? at(row, st, 2 * e + 1) : uint16_t(0));
}
inline const uint16_t* row_of(const AttentionOperand& t, int64_t b, int64_t h, int64_t r) {
  return reinterpret_cast<const uint16_t*>(t.at(b, h, r, 0));
}

// 2^x for x <= 0 (NaN stays NaN): 2^f by a degree-5 polynomial on f = x - round(x) in [-1/2, 1/2] (minimax
// for the relative error with the constant term 1, so 2^0 = 1), scaled by 2^round(x) (vscalefps): within 3
// ulps of 2^x (P is rounded to bf16; torch's flash attention takes its exp within 20). Three operations
// fewer than the f32 tiles' Exp2NonPositive. x is first clamped to -127: -inf (a masked key) gives a
// denormal at most, which the bf16 rounding of P (denormals as zero) and the sum both take as nothing.
DIFFQ_BF16_DOT_TARGET inline __m512 exp2_nonpositive(__m512 x) {
  x = _mm512_max_ps(_mm512_set1_ps(-127.0f), x);
  const __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(x, n);  // exact
  __m512 p = _mm512_set1_ps(0.0013264709850773215f);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.009671507403254509f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.05550733581185341f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.24022242426872253f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.6931470036506653f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

DIFFQ_BF16_DOT_TARGET inline float lanes_max(__m512 v) {
  alignas(64) float x[16];
  _mm512_store_ps(x, v);
  float m = x[0];
  for (int i = 1; i < 16; ++i) m = std::max(m, x[i]);
  return m;
}
DIFFQ_BF16_DOT_TARGET inline float lanes_sum(__m512 v) {
  alignas(64) float x[16];
  _mm512_store_ps(x, v);
  float s = 0.f;
  for (int i = 0; i < 16; ++i) s += x[i];
  return s;
}

// acc[6][2 P] += a pairs . the pairs of P panels (32 per step each, panel q at b[q]) over `steps` steps;
// a's pair for row r at step e is a[r * a_row + e * a_step] (a packed strip: 1, 6; P's rows: ldp, 1).
// Two panels at once (24 accumulators) keep both dot-product pipes busy where one (12) leaves them
// waiting on the latency.
template <int P>
DIFFQ_BF16_DOT_TARGET inline void micro(const uint32_t* __restrict a, int64_t a_row, int64_t a_step,
                                        const uint32_t* const (&b)[P], int64_t steps, __m512 (&acc)[kMR][2 * P]) {
  for (int64_t e = 0; e < steps; ++e, a += a_step) {
    __m512bh bv[2 * P];
    for (int q = 0; q < P; ++q) {
      bv[2 * q] = (__m512bh)_mm512_load_si512(b[q] + e * kNR);
      bv[2 * q + 1] = (__m512bh)_mm512_load_si512(b[q] + e * kNR + 16);
    }
#pragma GCC unroll 6
    for (int64_t r = 0; r < kMR; ++r) {
      const __m512bh av = (__m512bh)_mm512_set1_epi32(int(a[r * a_row]));
#pragma GCC unroll 4
      for (int v = 0; v < 2 * P; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], av, bv[v]);
    }
  }
}

}  // namespace

// For tests: y = exp2_nonpositive(x) (n a multiple of 16).
DIFFQ_BF16_DOT_TARGET void attention_bf16_exp2_for_test(const float* x, float* y, int64_t n) {
  for (int64_t j = 0; j < n; j += 16) _mm512_storeu_ps(y + j, exp2_nonpositive(_mm512_loadu_ps(x + j)));
}

// Row r of S (n keys, readable and writable up to n rounded up to 16): s = s * scale + add * log2(e)
// (add may be null); returns the max over [0, n).
DIFFQ_BF16_DOT_TARGET float attention_bf16_scale_and_max(float* s, int64_t n, float scale, const float* add) {
  const __m512 vs = _mm512_set1_ps(scale), log2e = _mm512_set1_ps(float(M_LOG2E));
  __m512 mx = _mm512_set1_ps(-INFINITY);
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 valid = n - j >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - j)) - 1);
    __m512 v = _mm512_mul_ps(_mm512_load_ps(s + j), vs);
    if (add) v = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(valid, add + j), log2e, v);
    _mm512_store_ps(s + j, v);
    mx = _mm512_mask_max_ps(mx, valid, mx, v);
  }
  return lanes_max(mx);
}

// P = 2^(s - m) for j < n (0 up to n rounded up to 32), rounded to bf16 into pb (pairs); returns the sum
// of the f32 P.
DIFFQ_BF16_DOT_TARGET float attention_bf16_exp_to_bf16(const float* s, int64_t n, float m, uint32_t* pb) {
  const __m512 vm = _mm512_set1_ps(m);
  __m512 sum = _mm512_setzero_ps();
  for (int64_t j = 0; j < n; j += 32) {
    __m512 e[2];
    for (int h = 0; h < 2; ++h) {
      const int64_t left = n - j - 16 * h;
      const __mmask16 valid = left >= 16 ? __mmask16(0xffff) : left <= 0 ? __mmask16(0) : __mmask16((1u << left) - 1);
      e[h] = _mm512_maskz_mov_ps(valid, exp2_nonpositive(_mm512_sub_ps(_mm512_load_ps(s + j + 16 * h), vm)));
      sum = _mm512_add_ps(sum, e[h]);
    }
    _mm512_store_si512(pb + j / 2, (__m512i)_mm512_cvtne2ps_pbh(e[1], e[0]));
  }
  return lanes_sum(sum);
}

namespace {

// The 6 x 32 P tile of acc to o (row stride ldo); panel q at o + 32 q.
template <int P>
DIFFQ_BF16_DOT_TARGET void store_tile(float* o, int64_t ldo, const __m512 (&acc)[kMR][2 * P]) {
  for (int64_t r = 0; r < kMR; ++r)
    for (int v = 0; v < 2 * P; ++v) _mm512_store_ps(o + r * ldo + 16 * v, acc[r][v]);
}

// QK^T for a group over panels [pj, pj + P) into s (row stride kb).
template <int P>
DIFFQ_BF16_DOT_TARGET void qk_panels(const uint32_t* qg, const uint32_t* kp, int64_t pj, int64_t Dp, float* s,
                                     int64_t kb) {
  __m512 acc[kMR][2 * P];
  for (auto& r : acc)
    for (auto& v : r) v = _mm512_setzero_ps();
  const uint32_t* b[P];
  for (int q = 0; q < P; ++q) b[q] = kp + (pj + q) * Dp * kNR;
  micro<P>(qg, 1, kMR, b, Dp, acc);
  store_tile<P>(s + pj * kNR, kb, acc);
}

// O[group, panels [pe, pe + P)] = alpha O (0 when alpha is null) + P V over `steps` key pairs.
template <int P>
DIFFQ_BF16_DOT_TARGET void pv_panels(const uint32_t* pg, int64_t ldp, const uint32_t* vp, int64_t pe, int64_t Skp,
                                     int64_t j2, int64_t steps, float* og, int64_t ldo, const float* alpha) {
  __m512 acc[kMR][2 * P];
  for (int64_t r = 0; r < kMR; ++r) {
    const __m512 a = _mm512_set1_ps(alpha ? alpha[r] : 0.f);
    for (int v = 0; v < 2 * P; ++v)
      acc[r][v] = alpha ? _mm512_mul_ps(a, _mm512_load_ps(og + pe * kNR + r * ldo + 16 * v)) : _mm512_setzero_ps();
  }
  const uint32_t* b[P];
  for (int q = 0; q < P; ++q) b[q] = vp + ((pe + q) * Skp + j2) * kNR;
  micro<P>(pg, ldp, 1, b, steps, acc);
  store_tile<P>(og + pe * kNR, ldo, acc);
}

DIFFQ_BF16_DOT_TARGET void tiles(const AttentionProblem& p, int64_t t0, int64_t t1) {
  const int64_t D = p.D, Dv = p.Dv, Sk = p.Sk, Sq = p.Sq;
  const int64_t Dp = (D + 1) / 2, Skp = (Sk + 1) / 2;
  const int64_t k_panels = (Sk + kNR - 1) / kNR, v_panels = (Dv + kNR - 1) / kNR, ldo = v_panels * kNR;
  const int64_t bq_pad = (std::min(p.bq, Sq) + kMR - 1) / kMR * kMR;
  const int64_t kb = std::min((std::max<int64_t>(p.bk, 1) + kNR - 1) / kNR, std::max<int64_t>(k_panels, 1)) * kNR;

  thread_local Scratch sc;
  uint32_t* const kp = sc.kp.get(size_t(k_panels * kNR * Dp));
  uint32_t* const vp = sc.vp.get(size_t(v_panels * kNR * Skp));
  uint32_t* const qp = sc.qp.get(size_t(bq_pad * Dp));
  uint32_t* const pb = sc.pb.get(size_t(bq_pad * kb / 2));
  float* const s = sc.s.get(size_t(bq_pad * kb));
  float* const o = sc.o.get(size_t(bq_pad * ldo));
  float* const mrow = sc.mrow.get(size_t(kb));
  float* const stats = sc.stats.get(size_t(3 * bq_pad));
  float *const m = stats, *const l = stats + bq_pad, *const alpha = stats + 2 * bq_pad;
  const int64_t kst = p.k.st[3], vst = p.v.st[3], qst = p.q.st[3];

  int64_t bound = -1;
  for (int64_t t = t0; t < t1; ++t) {
    const int64_t bh = t / p.q_blocks, b = bh / p.H, h = bh % p.H, i0 = (t % p.q_blocks) * p.bq;
    if (bh != bound) {
      // kp[panel][e2][jj] = (K[j][2 e2], K[j][2 e2 + 1]), j = panel * 32 + jj (0 past Sk and past D).
      for (int64_t pj = 0; pj < k_panels; ++pj) {
        uint32_t* dst = kp + pj * Dp * kNR;
        for (int64_t jj = 0; jj < kNR; ++jj) {
          const int64_t j = pj * kNR + jj;
          if (j >= Sk) {
            for (int64_t e = 0; e < Dp; ++e) dst[e * kNR + jj] = 0;
            continue;
          }
          const uint16_t* row = row_of(p.k, b, h, j);
          for (int64_t e = 0; e < Dp; ++e)
            dst[e * kNR + jj] = head_pair(row, kst, e, D);
        }
      }
      // vp[panel][j2][c] = (V[2 j2][col], V[2 j2 + 1][col]), col = panel * 32 + c (0 past Sk and Dv).
      for (int64_t j2 = 0; j2 < Skp; ++j2) {
        const uint16_t* r0 = row_of(p.v, b, h, 2 * j2);
        const uint16_t* r1 = 2 * j2 + 1 < Sk ? row_of(p.v, b, h, 2 * j2 + 1) : nullptr;
        for (int64_t pe = 0; pe < v_panels; ++pe) {
          uint32_t* dst = vp + (pe * Skp + j2) * kNR;
          for (int64_t cc = 0; cc < kNR; ++cc) {
            const int64_t col = pe * kNR + cc;
            dst[cc] = col < Dv ? pair(at(r0, vst, col), r1 ? at(r1, vst, col) : uint16_t(0)) : 0;
          }
        }
      }
      bound = bh;
    }
    const int64_t rows = std::min(p.bq, Sq - i0), groups = (rows + kMR - 1) / kMR, rows_pad = groups * kMR;
    // qp[g][e2][r] = (Q[i0 + r][2 e2], Q[i0 + r][2 e2 + 1]) (0 past `rows` and D).
    for (int64_t r = 0; r < rows_pad; ++r) {
      uint32_t* dst = qp + (r / kMR) * Dp * kMR + r % kMR;
      const uint16_t* row = r < rows ? row_of(p.q, b, h, i0 + r) : nullptr;
      for (int64_t e = 0; e < Dp; ++e)
        dst[e * kMR] = row ? head_pair(row, qst, e, D) : 0;
    }
    for (int64_t r = 0; r < rows_pad; ++r) m[r] = -INFINITY, l[r] = 0.f;
    if (Sk == 0) std::fill(o, o + rows_pad * ldo, 0.f);

    for (int64_t j0 = 0; j0 < Sk; j0 += kb) {
      const int64_t n = std::min(kb, Sk - j0), n_panels = (n + kNR - 1) / kNR;
      // 1. S = Q K^T for keys [j0, j0 + n), row stride kb.
      for (int64_t g = 0; g < groups; ++g) {
        const uint32_t* qg = qp + g * Dp * kMR;
        const uint32_t* kblock = kp + (j0 / kNR) * Dp * kNR;
        float* sg = s + g * kMR * kb;
        int64_t pj = 0;
        for (; pj + 2 <= n_panels; pj += 2) qk_panels<2>(qg, kblock, pj, Dp, sg, kb);
        if (pj < n_panels) qk_panels<1>(qg, kblock, pj, Dp, sg, kb);
      }
      // 2. Online softmax in f32; P in bf16 pairs (row stride kb / 2).
      attention_bf16_softmax_block(p, b, h, i0, rows, rows_pad, j0, n, s, kb, pb, kb / 2, n_panels * kNR / 2, mrow, m,
                                   l, alpha, [](int64_t) {});
      // 3. O = alpha O + P V over the block's key pairs.
      const int64_t steps = (n + 1) / 2;
      for (int64_t g = 0; g < groups; ++g) {
        const uint32_t* pg = pb + g * kMR * (kb / 2);
        float* og = o + g * kMR * ldo;
        const float* ag = j0 == 0 ? nullptr : alpha + g * kMR;
        int64_t pe = 0;
        for (; pe + 2 <= v_panels; pe += 2) pv_panels<2>(pg, kb / 2, vp, pe, Skp, j0 / 2, steps, og, ldo, ag);
        if (pe < v_panels) pv_panels<1>(pg, kb / 2, vp, pe, Skp, j0 / 2, steps, og, ldo, ag);
      }
    }
    // out = O / l in the output dtype (l = 0: every key masked, 0 as torch).
    const int64_t pos0 = (b * p.H + h) * Sq + i0;
    for (int64_t r = 0; r < rows; ++r) attention_store_row(p, pos0 + r, o + r * ldo, l[r]);
  }
}

}  // namespace

bool attention_bf16_dot_enabled(const Tuning& t) {
  return t.gemm_kernel != GemmKernel::diffq_widen && bf16_dot_gemm_usable();
}

bool attention_bf16_dot_applies(const AttentionProblem& p, const Tuning& t) {
  return p.q.dtype == DType::bf16 && p.k.dtype == DType::bf16 && p.v.dtype == DType::bf16 && p.q.base &&
         p.k.base && p.v.base && attention_bf16_dot_enabled(t);
}

void attention_tiles_bf16_dot(const AttentionProblem& p, int64_t t0, int64_t t1) { tiles(p, t0, t1); }

}  // namespace diffq::backend::cpu
