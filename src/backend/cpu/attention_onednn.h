// The attention tiles of attention.cpp for bf16 Q, K and V with the two block products on oneDNN's
// bf16 matmul (onednn_gemm.h: brgemm on AMX tiles where the CPU has AMX-BF16, vdpbf16ps otherwise),
// as PyTorch's CPU flash attention runs its tiles on AMX. Per tile (b, h, block of bq query rows) and
// block of bk keys: S = Q K^T (bf16 x bf16 -> f32, one matmul of rows x keys x D), the online softmax
// in f32 with the vdpbf16ps tiles' row code (attention_bf16_dot.h: scale x log2(e), mask, running max
// and sum of the f32 P, the same base-2 exponential), P rounded to bf16 (nearest even), O = alpha O +
// P V (one matmul of rows x Dv x keys accumulating into O). Same tiling, masks, fully masked rows (0)
// and output rounding as the other tiles; the oracle is reference::sdpa. Q, K and V rows with a unit
// column stride are read in place (any row stride: FLUX's [B, S, H, D] views), others packed per head.
// Blocks of a multiple of 64 keys run on K and V packed once per head into oneDNN's blocked layout
// (onednn_gemm.h), Q then copied dense per tile; the last, partial block on the plain rows
// (AttentionProblem::pack_kv off: all blocks).
#pragma once

#include <cstdint>

#include "backend/cpu/attention_tiles.h"

namespace diffq::backend::cpu {

// Whether these tiles can run here: oneDNN has a native bf16 matmul (onednn_bf16_available()) and the
// CPU the AVX512-BF16 the softmax rows use (bf16_dot_gemm_usable()).
bool attention_onednn_usable();

// The block of keys the tiles take for sk keys and the tuning's bk (a multiple of 32, at most sk rounded up
// to 32): bk, or where sk is a multiple of 64 the largest divisor of sk that is a multiple of 64 between
// bk / 2 and 3 bk / 2 (Wan-small's 1280 keys as 2 x 640, FLUX's 768 at 256 x 256 as one block), so that
// every block is a full one on the packed K and V: a last, partial block runs on the plain operands at
// about half the rate (docs/benchmarks.md "Attention on AMX: key blocks that divide the keys").
int64_t attention_onednn_key_block(int64_t sk, int64_t bk);

// Tiles [t0, t1) of p (bf16 q, k and v; as AttentionTiles). Requires attention_onednn_usable().
void attention_tiles_onednn(const AttentionProblem& p, int64_t t0, int64_t t1);

}  // namespace diffq::backend::cpu
