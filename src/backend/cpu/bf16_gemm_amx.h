// The bf16 linear's GEMM on AMX-BF16 tiles (TDPBF16PS), for packed bf16 linear weights (packed_linear_weight.h)
// where the CPU has AMX-BF16: C = X W^T with X bf16 rows and W packed once in oneDNN's blocked layout
// (onednn_gemm.h: BA16a64b2a, read in place: a 16-column tile is 64 bytes of each 256-byte row of k pairs).
//
// K-blocked for this machine class's caches (about 1.2 MB of L2 a core usable, ~28 GB/s from L3): a chunk of
// X's rows (up to 256 rows x Kc) stays in L2 while every 32-column block of the part's W chunk streams past
// it once (prefetched into L2 a block ahead) and is used by each 32-row block from L2; 32 x 32 blocks of 2 x 2
// tiles of 16 x 16 f32 accumulate one K chunk, the partial sums of earlier chunks going through a per-thread f32
// buffer (stored and reloaded exactly: the sums are added in the order of k, as one accumulator would). Each
// finished block is handed to the caller while in L1 (the linear's bias / rounding / activation run there).
#pragma once

#include <cstdint>
#include <functional>

#include "backend/cpu/amx_tiles.h"

namespace diffq::backend::cpu {

// A finished block: f32 C of output rows [i0, i0 + rows) x columns [j0, j0 + cols) at c (row stride 32).
using AmxF32BlockDone = std::function<void(const float* c, int64_t i0, int64_t rows, int64_t j0, int64_t cols)>;

// Rows [r0, r1) x columns [c0, c1) of C = X W^T on the calling thread: X [M, k] bf16 at row stride ldx (rows
// past r1 are not read), W [n, k] packed whole (w_packed: onednn_pack_bf16_weight's output), c0 a multiple of
// 64, c1 <= n. Loads and releases the tile state. Requires amx_bf16_usable().
void amx_bf16_packed_gemm_part(int64_t k, const uint16_t* x, int64_t ldx, const uint16_t* w_packed, int64_t r0,
                               int64_t r1, int64_t c0, int64_t c1, const AmxF32BlockDone& done);

// y[i, j] = bf16(c[i, j] + bias[j]) for a block's rows x cols (c: rows of 32 floats; bias may be null): f32_to_bf16's
// rounding (to nearest even, NaN to the canonical quiet NaN), by vectors. Requires amx_bf16_usable().
void amx_bf16_block_to_bf16(const float* c, int64_t rows, int64_t cols, const float* bias, uint16_t* y, int64_t ldy);

}  // namespace diffq::backend::cpu
