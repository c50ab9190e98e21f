// The int8 x int8 -> int32 GEMM on AMX-INT8 tiles (TDPBSSD), for the int8 GEMM (int8_gemm.h) where the CPU
// has AMX-INT8: C = A B^T with A int8 rows and B the weight's int8 rows W[n, k], in 32 x 32 blocks of
// 2 x 2 tiles of 16 x 16 int32 accumulated over all of K in steps of 64, each finished block handed to the
// caller while in L1 (the int8 linear's epilogue runs there, so C never goes through memory as int32).
//
// W is copied per call into the tiles' B layout (the 4 consecutive k of a column side by side), a slab of
// columns at a time sized to stay in L2 across all row blocks; A's tiles are read from its rows in place,
// so A must be in the form amx_int8_copy_rows writes (the activation quantizer writes it that way).
// The products are exact (int32 sums of int8 products, as the reference); only the order of the
// epilogue's blocks differs from the other kernels.
#pragma once

#include <cstdint>
#include <functional>

#include "backend/cpu/amx_tiles.h"

namespace diffq::backend::cpu {

// Row stride (bytes) and row count A needs for the tiles: rows of k int8 zero-padded to a multiple of 64, and
// m rows followed by zero rows up to a multiple of 32, 64-byte aligned.
inline int64_t amx_int8_lda(int64_t k) { return (k + 63) / 64 * 64; }
inline int64_t amx_int8_rows(int64_t m) { return (m + 31) / 32 * 32; }
// Copies A (m x k, row stride lda) into dst in that form (dst: amx_int8_rows(m) x amx_int8_lda(k), aligned):
// what the tiles read in place.
void amx_int8_copy_rows(int64_t m, int64_t k, const int8_t* a, int64_t lda, int8_t* dst);

// A finished part of a block: int32 C of output rows [i0, i0 + rows) x columns [j0, j0 + cols) at c (row
// stride 32).
using AmxBlockDone = std::function<void(const int32_t* c, int64_t i0, int64_t rows, int64_t j0, int64_t cols)>;

// Rows [r0, r1) x columns [c0, c1) of C = A W^T (r0 a multiple of 32; A in the tiles' form, k its row
// length, W [n, k] at row stride ldw, c1 <= n), on the calling thread, each 32 x 32 block (or the part's
// edge) handed to done a few rows at a time, spread over the next block's tile steps (the matrix unit works
// through its products while the vector units finish the previous rows); columns go by slabs whose copied W
// stays in L2 while every row block goes by. Loads and releases the tile state. Requires amx_int8_usable().
void amx_int8_gemm_part(int64_t k, const int8_t* a, int64_t lda, const int8_t* w, int64_t ldw, int64_t r0, int64_t r1,
                        int64_t c0, int64_t c1, const AmxBlockDone& done);

// The B layout of the tiles, for the tests: columns [j0, j0 + 32) of W as 2 x (k padded to 64) / 64 tiles
// of 1 KiB, tile (kb, t) holding in row g the 4 bytes W[j0 + 16 t + j][64 kb + 4 g + 0..3] for j = 0..15;
// columns at or past `cols` and k past k as zeros. dst: amx_int8_lda(k) / 64 * 2048 bytes.
void amx_int8_pack_b_block(int64_t k, const int8_t* w, int64_t ldw, int64_t j0, int64_t cols, int8_t* dst);
void amx_int8_pack_b_block_reference(int64_t k, const int8_t* w, int64_t ldw, int64_t j0, int64_t cols, int8_t* dst);

}  // namespace diffq::backend::cpu
