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

}  // namespace diffq::backend::cpu
