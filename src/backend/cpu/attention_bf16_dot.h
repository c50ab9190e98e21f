// The attention tiles of attention.cpp for bf16 Q, K and V on the CPU's bf16 dot product (AVX512-BF16
// vdpbf16ps), as PyTorch's CPU flash attention computes bf16: S = Q K^T from bf16 pairs (along the head
// dim) with f32 accumulation, scaled in f32; the online softmax in f32 (row sums of the f32 P); P
// rounded to bf16 for O += P V (pairs along the keys, f32 accumulation). Same tiling, masks, fully
// masked rows (0) and output rounding as the f32 tiles. The oracle is reference::sdpa.
#pragma once

#include <cstdint>

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

// The softmax steps of these tiles on one row of S, shared with the oneDNN tiles (attention_onednn.h)
// so both round P the same way. AVX512-BF16 code: call only where bf16_dot_gemm_usable().
// s = s * scale + add * log2(e) for the n keys (add may be null; s 64-byte aligned, readable and
// writable up to n rounded up to 16); returns the max over [0, n).
float attention_bf16_scale_and_max(float* s, int64_t n, float scale, const float* add);
// P = 2^(s - m) for j < n (0 up to n rounded up to 32; s readable up to there), rounded to bf16 (round
// to nearest even) into pb as a contiguous bf16 row (64-byte aligned); returns the sum of the f32 P.
float attention_bf16_exp_to_bf16(const float* s, int64_t n, float m, uint32_t* pb);
// alpha[r] = 2^(m[r] - m_new[r]) for r < rows (the online softmax's rescales, by the same exponential):
// 1 where m_new[r] is -inf (nothing attended yet), 0 where only m[r] is.
void attention_bf16_rescales(const float* m, const float* m_new, int64_t rows, float* alpha);
// The exponential of those (2^x for x <= 0, within 3 ulps; NaN stays NaN), for tests: n a multiple of 16,
// and only where the tiles run (bf16_dot_gemm_usable).
void attention_bf16_exp2_for_test(const float* x, float* y, int64_t n);

}  // namespace diffq::backend::cpu
