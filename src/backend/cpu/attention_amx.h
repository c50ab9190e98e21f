// The attention tiles of attention.cpp for bf16 Q, K and V with both block products on AMX tiles, written
// for attention's shapes (the oneDNN tiles, attention_onednn.h, make two library calls per block of keys,
// whose fixed cost and f32 S in L2 the short products, K = head dim, do not amortise). Per tile (b, h,
// block of bq query rows), in blocks of 32 query rows (two 16-row AMX tiles) and of up to 768 keys (equal
// blocks, a multiple of 32):
//   S = Q K^T: 2 x 2 tiles of 16 x 16 f32 accumulate over the head dim in steps of 32 (TDPBF16PS), Q
//     copied dense (zero-padded to 32 rows and a head dim rounded up to 32), K packed once per head into
//     the AMX B layout (pairs of head-dim values per key);
//   the online softmax in f32 with the vdpbf16ps tiles' row code (attention_bf16_dot.h: scale x log2(e),
//     mask, running max and sum of the f32 P, P rounded to bf16);
//   O = alpha O + P V: P's rows as the A tiles, V packed once per head (pairs of keys per value column),
//     O in f32 (Dv rounded up to 32) loaded into and stored from the accumulator tiles per block;
// the next block's S = Q K^T (same head) is issued between the softmax rows, so that the core runs the
// matrix tiles and the vector work side by side.
// Any D, Dv, Sq, Sk, masks and strides (padding with zeros: padded keys are outside the softmax's n, padded
// rows and columns never stored). Same online softmax, masks, fully masked rows (0) and output rounding as
// the other tiles; only the products' summation order differs (the oracle is reference::sdpa).
#pragma once

#include <cstdint>

#include "backend/cpu/attention_tiles.h"

namespace diffq::backend::cpu {

// Whether these tiles can run here: the CPU has AMX-BF16 and the kernel grants this process the tile state
// (amx_tiles_permitted), and AVX512-BF16 for the softmax rows (bf16_dot_gemm_usable: not under a forced
// lower SIMD target).
bool attention_amx_usable();

// Tiles [t0, t1) of p (bf16 q, k and v; as AttentionTiles). Requires attention_amx_usable().
void attention_tiles_amx(const AttentionProblem& p, int64_t t0, int64_t t1);

}  // namespace diffq::backend::cpu
