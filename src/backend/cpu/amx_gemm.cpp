// The block driver of the GEMMs on AMX tiles (see amx_gemm.h).
#include "backend/cpu/amx_gemm.h"

#include <immintrin.h>

#include <algorithm>

#include "backend/cpu/amx_tiles.h"

namespace diffq::backend::cpu {

namespace {

constexpr int64_t kBlock = 32;  // rows and columns of a block
constexpr int64_t kStep = 64;   // bytes of A's rows per step
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

// C[32][32] (row stride 32) = A rows (stride lda) x B tiles over `steps` steps (int8 x int8 -> int32): tiles
// 4 and 5 the A rows [0, 16) and [16, 32), 6 and 7 the B columns [0, 16) and [16, 32), 0-3 the accumulators;
// loads interleaved with the products that need them. p's rows go to done spread over the steps, all before C
// is stored.
DIFFQ_AMX_TARGET void block_2x2(const uint8_t* a, int64_t lda, const uint8_t* b, const AmxBTiles& bt, int64_t steps,
                                int32_t* c, Pending& p, const AmxBlockDone& done) {
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  const uint8_t* a1 = a + 16 * lda;
  const int64_t second = bt.second, stride = bt.stride, step = bt.step;
  for (int64_t s = 0; s < steps; ++s, b += step) {
    _tile_loadd(4, a + s * kStep, lda);
    _tile_loadd(6, b, stride);
    _tile_dpbssd(0, 4, 6);
    _tile_loadd(7, b + second, stride);
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

void run_part(const std::function<const uint8_t*(int64_t)>& a_rows, int64_t lda, int64_t steps, const AmxBTiles& b,
              int64_t slab_blocks, int64_t r0, int64_t r1, int64_t c0, int64_t c1, const AmxBlockDone& done) {
  const int64_t blocks = (c1 - c0 + kBlock - 1) / kBlock, slab = std::clamp<int64_t>(slab_blocks, 1, blocks);
  alignas(64) int32_t c[2][kBlock * kBlock];  // the block being computed and the one being handed over
  Pending p;
  int64_t n_done = 0;
  amx_load_tile_config();
  for (int64_t q0 = 0; q0 < blocks; q0 += slab) {
    const int64_t nq = std::min(slab, blocks - q0);
    p.until(p.rows, done);
    if (b.prepare) b.prepare(q0, nq);
    for (int64_t i0 = r0; i0 < r1; i0 += kBlock) {
      const uint8_t* a = a_rows(i0);
      for (int64_t q = q0; q < q0 + nq; ++q, ++n_done) {
        const int64_t j = c0 + q * kBlock;
        int32_t* cb = c[n_done % 2];
        block_2x2(a, lda, b.tiles(q), b, steps, cb, p, done);
        p = Pending{cb, i0, std::min(kBlock, r1 - i0), j, std::min(kBlock, c1 - j), 0};
      }
    }
  }
  p.until(p.rows, done);
  amx_release_tiles();
}

}  // namespace

void amx_gemm_part(const std::function<const uint8_t*(int64_t i0)>& a_rows, int64_t lda, int64_t steps,
                   const AmxBTiles& b, int64_t slab_blocks, int64_t r0, int64_t r1, int64_t c0, int64_t c1,
                   const AmxBlockDone& done) {
  if (r1 > r0 && c1 > c0) run_part(a_rows, lda, steps, b, slab_blocks, r0, r1, c0, c1, done);
}

}  // namespace diffq::backend::cpu
