// The int8 GEMM on AMX-INT8 tiles (see int8_gemm_amx.h).
#include "backend/cpu/int8_gemm_amx.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "backend/cpu/aligned_buffer.h"
#include "backend/cpu/amx_tiles.h"

namespace diffq::backend::cpu {

namespace {

constexpr int64_t kBlock = 32;              // rows and columns of a block: 2 x 2 tiles of 16 x 16 int32
constexpr int64_t kStep = 64;               // k per tile step (16 groups of 4)
constexpr int64_t kTileBytes = 1024;        // 16 rows x 64 bytes
constexpr int64_t kStepBytes = 2 * kTileBytes;  // one step of a column block: its two B tiles
// The packed B of a slab of column blocks (32 x K bytes each) stays in L2 while every row block of the part
// goes by (measured on an AMX Xeon with 2 MiB of L2 a core: slabs of about 1.2 MB beat 0.4 MB and one block).
constexpr int64_t kSlabBytes = 1200 * 1024;

// Rows of the previous block handed over at a time between steps (1 row a call measured slower: the
// epilogue's fixed cost per call).
constexpr int64_t kPiece = 4;

// The previous block's rows still to hand over.
struct Pending {
  const int32_t* c = nullptr;
  int64_t i0 = 0, rows = 0, j0 = 0, cols = 0, next = 0;
  void until(int64_t upto, const AmxBlockDone& done) {
    if (upto <= next) return;
    done(c + next * kBlock, i0 + next, upto - next, j0, cols);
    next = upto;
  }
};

// C[32][32] (row stride 32) = A rows (stride lda) x one packed column block of B over `steps` steps: tiles
// 4 and 5 the A rows [0, 16) and [16, 32), 6 and 7 the B columns [0, 16) and [16, 32), 0-3 the accumulators;
// loads interleaved with the products that need them. p's rows go to done spread over the steps, all before C
// is stored.
DIFFQ_AMX_TARGET void block_2x2(const int8_t* a, int64_t lda, const uint8_t* b, int64_t steps, int32_t* c, Pending& p,
                                const AmxBlockDone& done) {
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  const int8_t* a1 = a + 16 * lda;
  for (int64_t s = 0; s < steps; ++s, b += kStepBytes) {
    _tile_loadd(4, a + s * kStep, lda);
    _tile_loadd(6, b, 64);
    _tile_dpbssd(0, 4, 6);
    _tile_loadd(7, b + kTileBytes, 64);
    _tile_dpbssd(1, 4, 7);
    _tile_loadd(5, a1 + s * kStep, lda);
    _tile_dpbssd(2, 5, 6);
    _tile_dpbssd(3, 5, 7);
    p.until(std::min(p.rows, (p.rows * (s + 1) / steps + kPiece - 1) / kPiece * kPiece), done);
  }
  p.until(p.rows, done);
  constexpr int64_t ldc = kBlock * 4;
  _tile_stored(0, c, ldc);
  _tile_stored(1, c + 16, ldc);
  _tile_stored(2, c + 16 * kBlock, ldc);
  _tile_stored(3, c + 16 * kBlock + 16, ldc);
}

// Group g (k = 4 g .. 4 g + 3) of row j of W, zero past k.
inline uint32_t group_bytes(const int8_t* row, int64_t k, int64_t g) {
  uint8_t v[4] = {0, 0, 0, 0};
  for (int64_t q = 0; q < 4; ++q)
    if (4 * g + q < k) v[q] = uint8_t(row[4 * g + q]);
  uint32_t u;
  std::memcpy(&u, v, 4);
  return u;
}

}  // namespace

void amx_int8_copy_rows(int64_t m, int64_t k, const int8_t* a, int64_t lda, int8_t* dst) {
  amx_copy_padded_rows(a, lda, m, k, amx_int8_lda(k), dst);
}

void amx_int8_pack_b_block_reference(int64_t k, const int8_t* w, int64_t ldw, int64_t j0, int64_t cols, int8_t* dst) {
  const int64_t steps = amx_int8_lda(k) / kStep;
  for (int64_t s = 0; s < steps; ++s)
    for (int64_t t = 0; t < 2; ++t)
      for (int64_t g = 0; g < 16; ++g)
        for (int64_t j = 0; j < 16; ++j) {
          const int64_t col = 16 * t + j;
          const uint32_t u = col < cols ? group_bytes(w + (j0 + col) * ldw, k, s * 16 + g) : 0u;
          std::memcpy(dst + (s * 2 + t) * kTileBytes + g * 64 + j * 4, &u, 4);
        }
}

// (GCC 12's unpack intrinsics pass _mm512_undefined_epi32(), a self-initialised variable, as the unused merge
// source: -Wuninitialized flags every inlined use.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
// The tile of 16 full columns at `rows` (row stride ldw) and 64 k: the 16 x 16 matrix of 4-byte groups
// (row j: column j's 64 bytes) transposed in registers (groups of 4 bytes as 32-bit lanes).
DIFFQ_AMX_TARGET inline void transpose_tile(const int8_t* rows, int64_t ldw, int8_t* tile) {
  __m512i r[16], t[16];
  for (int j = 0; j < 16; ++j) r[j] = _mm512_loadu_si512(rows + j * ldw);
  // Per 128-bit lane L (groups 4 L .. 4 L + 3): 32-bit interleaves of row pairs, then 64-bit ones of pairs of
  // those (r[4 b + c]: rows 4 b .. 4 b + 3 of group 4 L + c), then the lanes regrouped twice.
  for (int j = 0; j < 16; j += 2) {
    t[j] = _mm512_unpacklo_epi32(r[j], r[j + 1]);
    t[j + 1] = _mm512_unpackhi_epi32(r[j], r[j + 1]);
  }
  for (int j = 0; j < 16; j += 4) {
    r[j] = _mm512_unpacklo_epi64(t[j], t[j + 2]);
    r[j + 1] = _mm512_unpackhi_epi64(t[j], t[j + 2]);
    r[j + 2] = _mm512_unpacklo_epi64(t[j + 1], t[j + 3]);
    r[j + 3] = _mm512_unpackhi_epi64(t[j + 1], t[j + 3]);
  }
  for (int j = 0; j < 4; ++j) {
    t[j] = _mm512_shuffle_i32x4(r[j], r[j + 4], 0x88);
    t[j + 4] = _mm512_shuffle_i32x4(r[j], r[j + 4], 0xdd);
    t[j + 8] = _mm512_shuffle_i32x4(r[j + 8], r[j + 12], 0x88);
    t[j + 12] = _mm512_shuffle_i32x4(r[j + 8], r[j + 12], 0xdd);
  }
  for (int j = 0; j < 8; ++j) {
    r[j] = _mm512_shuffle_i32x4(t[j], t[j + 8], 0x88);
    r[j + 8] = _mm512_shuffle_i32x4(t[j], t[j + 8], 0xdd);
  }
  // r[g] now holds group g of the 16 columns in lane j = column j: the tile's row g.
  for (int g = 0; g < 16; ++g) _mm512_storeu_si512(tile + g * 64, r[g]);
}
#pragma GCC diagnostic pop

// Tiles of 16 full columns and k steps inside k: transposed in registers; the others (columns past `cols`,
// the groups that cross k) row by row: row g of a tile gathers the g-th group of 4 bytes of its 16 columns'
// rows (a stride of ldw bytes), the groups that cross k element by element.
DIFFQ_AMX_TARGET void amx_int8_pack_b_block(int64_t k, const int8_t* w, int64_t ldw, int64_t j0, int64_t cols,
                                            int8_t* dst) {
  const int64_t steps = amx_int8_lda(k) / kStep, whole = k / 4;
  for (int64_t t = 0; t < 2 && cols >= 16 * (t + 1); ++t)
    for (int64_t s = 0; s < k / kStep; ++s)
      transpose_tile(w + (j0 + 16 * t) * ldw + s * kStep, ldw, dst + (s * 2 + t) * kTileBytes);
  const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                         _mm512_set1_epi32(int32_t(ldw)));
  for (int64_t t = 0; t < 2; ++t) {
    const int64_t live = std::clamp<int64_t>(cols - 16 * t, 0, 16);
    const __mmask16 mask = __mmask16((1u << live) - 1u);
    const int8_t* base = w + (j0 + 16 * t) * ldw;
    for (int64_t s = live == 16 ? k / kStep : 0; s < steps; ++s) {
      int8_t* tile = dst + (s * 2 + t) * kTileBytes;
      for (int64_t g = 0; g < 16; ++g) {
        const int64_t grp = s * 16 + g;
        if (live == 0) {
          _mm512_storeu_si512(tile + g * 64, _mm512_setzero_si512());
        } else if (grp < whole) {
          _mm512_storeu_si512(tile + g * 64, _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), mask, idx,
                                                                       base + 4 * grp, 1));
        } else {
          for (int64_t j = 0; j < 16; ++j) {
            const uint32_t u = j < live ? group_bytes(base + j * ldw, k, grp) : 0u;
            std::memcpy(tile + g * 64 + j * 4, &u, 4);
          }
        }
      }
    }
  }
}

void amx_int8_gemm_part(int64_t k, const int8_t* a, int64_t lda, const int8_t* w, int64_t ldw, int64_t r0, int64_t r1,
                        int64_t c0, int64_t c1, const AmxBlockDone& done) {
  if (r1 <= r0 || c1 <= c0) return;
  const int64_t steps = amx_int8_lda(k) / kStep, block_bytes = steps * kStepBytes;
  const int64_t blocks = (c1 - c0 + kBlock - 1) / kBlock;
  const int64_t slab = std::clamp<int64_t>(kSlabBytes / block_bytes, 1, blocks);
  thread_local AlignedBuffer<uint8_t> bbuf;
  uint8_t* const bp = bbuf.get(size_t(slab * block_bytes));
  alignas(64) int32_t c[2][kBlock * kBlock];  // the block being computed and the one being handed over
  Pending p;
  int64_t n_done = 0;
  amx_load_tile_config();
  for (int64_t q0 = 0; q0 < blocks; q0 += slab) {
    const int64_t nq = std::min(slab, blocks - q0);
    p.until(p.rows, done);
    for (int64_t q = 0; q < nq; ++q) {
      const int64_t j = c0 + (q0 + q) * kBlock;
      amx_int8_pack_b_block(k, w, ldw, j, std::min(kBlock, c1 - j), reinterpret_cast<int8_t*>(bp + q * block_bytes));
    }
    for (int64_t i0 = r0; i0 < r1; i0 += kBlock)
      for (int64_t q = 0; q < nq; ++q, ++n_done) {
        const int64_t j = c0 + (q0 + q) * kBlock;
        int32_t* cb = c[n_done % 2];
        block_2x2(a + i0 * lda, lda, bp + q * block_bytes, steps, cb, p, done);
        p = Pending{cb, i0, std::min(kBlock, r1 - i0), j, std::min(kBlock, c1 - j), 0};
      }
  }
  p.until(p.rows, done);
  amx_release_tiles();
}

}  // namespace diffq::backend::cpu
