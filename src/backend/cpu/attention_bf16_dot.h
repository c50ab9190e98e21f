// The attention tiles of attention.cpp for bf16 Q, K and V on the CPU's bf16 dot product (AVX512-BF16
// vdpbf16ps), as PyTorch's CPU flash attention computes bf16: S = Q K^T from bf16 pairs (along the head
// dim) with f32 accumulation, scaled in f32; the online softmax in f32 (row sums of the f32 P); P
// rounded to bf16 for O += P V (pairs along the keys, f32 accumulation). Same tiling, masks, fully
// masked rows (0) and output rounding as the f32 tiles. The oracle is reference::sdpa.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "backend/cpu/attention_tiles.h"

namespace diffq::backend::cpu {

struct Tuning;

// Whether bf16 attention runs on these tiles under t: the CPU's bf16 dot product usable
// (bf16_dot_gemm.h) and not DIFFQ_GEMM_KERNEL=diffq-widen (the f32 tiles forced).
bool attention_bf16_dot_enabled(const Tuning& t);

// Whether these tiles run p under t: bf16 q, k and v, and attention_bf16_dot_enabled(t).
bool attention_bf16_dot_applies(const AttentionProblem& p, const Tuning& t);

// Tiles [t0, t1) of p (as AttentionTiles). Requires attention_bf16_dot_applies(p).
void attention_tiles_bf16_dot(const AttentionProblem& p, int64_t t0, int64_t t1);

// The softmax steps of these tiles on one row of S, shared with the oneDNN and AMX tiles (attention_onednn.h,
// attention_amx.h)
// so both round P the same way. AVX512-BF16 code: call only where bf16_dot_gemm_usable().
// s = s * scale + add * log2(e) for the n keys (add may be null; s 64-byte aligned, readable and
// writable up to n rounded up to 16); returns the max over [0, n).
float attention_bf16_scale_and_max(float* s, int64_t n, float scale, const float* add);
// P = 2^(s - m) for j < n (0 up to n rounded up to 32; s readable up to there), rounded to bf16 (round
// to nearest even) into pb as a contiguous bf16 row (64-byte aligned); returns the sum of the f32 P.
float attention_bf16_exp_to_bf16(const float* s, int64_t n, float m, uint32_t* pb);
// The exponential of those (2^x for x <= 0, within 3 ulps; NaN stays NaN), for tests: n a multiple of 16,
// and only where the tiles run (bf16_dot_gemm_usable).
void attention_bf16_exp2_for_test(const float* x, float* y, int64_t n);

// The online softmax of one block of keys [j0, j0 + n) for the query rows [i0, i0 + rows_pad) of head (b, h)
// (rows from `rows` on are padding: no mask), the steps above row by row: S's rows (stride lds) scaled and
// masked, the running max m and sum l (f32 P) updated, P as bf16 pair rows (stride ldp pairs; a row with
// nothing attended yet gets p_zero zero pairs), alpha[r] the rescale of O's row for this block (1 where
// nothing is attended yet, 0 where this block is the first attended). after_row(r) runs after each row (the
// AMX tiles issue matrix work there). Shared by the vdpbf16ps, oneDNN and AMX tiles, so all three compute P
// alike. mrow: scratch of n floats for attention_mask_row.
template <class AfterRow>
void attention_bf16_softmax_block(const AttentionProblem& p, int64_t b, int64_t h, int64_t i0, int64_t rows,
                                  int64_t rows_pad, int64_t j0, int64_t n, float* s, int64_t lds, uint32_t* pb,
                                  int64_t ldp, int64_t p_zero, float* mrow, float* m, float* l, float* alpha,
                                  const AfterRow& after_row) {
  for (int64_t r = 0; r < rows_pad; ++r) {
    float* srow = s + r * lds;
    uint32_t* prow = pb + r * ldp;
    const float* add = r < rows ? attention_mask_row(p, b, h, i0 + r, j0, n, mrow) : nullptr;
    const float m_new = std::max(m[r], attention_bf16_scale_and_max(srow, n, p.scale_log2e, add));
    if (m_new == -INFINITY) {  // nothing attended in this row yet: P = 0, O stays 0
      std::memset(prow, 0, size_t(p_zero) * sizeof(uint32_t));
      alpha[r] = 1.f;
    } else {
      alpha[r] = m[r] == -INFINITY ? 0.f : std::exp2(m[r] - m_new);
      l[r] = l[r] * alpha[r] + attention_bf16_exp_to_bf16(srow, n, m_new, prow);
      m[r] = m_new;
    }
    after_row(r);
  }
}

// O's rows r < rows (stride ldo, cols values) times alpha[r] (the oneDNN and AMX tiles, between blocks).
inline void attention_rescale_rows(float* o, int64_t ldo, int64_t cols, const float* alpha, int64_t rows) {
  for (int64_t r = 0; r < rows; ++r)
    if (alpha[r] != 1.f)
      for (int64_t c = 0; c < cols; ++c) o[r * ldo + c] *= alpha[r];
}

}  // namespace diffq::backend::cpu
