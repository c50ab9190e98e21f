// The block driver of the int8 GEMM on AMX tiles (int8_gemm_amx.h, TDPBSSD): C = A B^T over all of K in
// 32 x 32 blocks of 2 x 2 tiles of 16 x 16 int32 accumulators, in steps of 64 int8 of A's rows, each
// finished block handed to the caller while in L1, its rows spread over the next block's tile steps (the
// matrix unit works through its products while the vector units finish the previous rows). Columns go by
// slabs of blocks whose B stays in L2 while every row block of the part goes by. (The B source is the
// caller's: the int8 tiles copy W into their layout per slab.)
#pragma once

#include <cstdint>
#include <functional>

namespace diffq::backend::cpu {

// Where the B tiles of a part's column blocks are: block q (columns [c0 + 32 q, c0 + 32 q + 32) of the part)
// has its step-0 tile of columns [0, 16) at tiles(q), the one of columns [16, 32) `second` bytes after it,
// each tile's 16 rows `stride` bytes apart, and step s at s x `step` bytes from step 0.
struct AmxBTiles {
  std::function<void(int64_t q0, int64_t nq)> prepare;  // before a slab of blocks [q0, q0 + nq) is used (may be empty)
  std::function<const uint8_t*(int64_t q)> tiles;
  int64_t step = 0, second = 0, stride = 64;
};

// A finished block: int32 C of output rows [i0, i0 + rows) x columns [j0, j0 + cols) at c (row stride 32).
using AmxBlockDone = std::function<void(const int32_t* c, int64_t i0, int64_t rows, int64_t j0, int64_t cols)>;

// Rows [r0, r1) x columns [c0, c1) of C on the calling thread (loads and releases the tile state): a_rows(i0)
// gives the 32 rows of A from row i0 (row stride lda bytes; rows past r1 may hold anything finite), `steps`
// steps over K; slab_blocks column blocks per slab. Requires the CPU's AMX (amx_tiles_permitted).
void amx_gemm_part(const std::function<const uint8_t*(int64_t i0)>& a_rows, int64_t lda, int64_t steps,
                   const AmxBTiles& b, int64_t slab_blocks, int64_t r0, int64_t r1, int64_t c0, int64_t c1,
                   const AmxBlockDone& done);

}  // namespace diffq::backend::cpu
