// The bf16 GEMM on AMX-BF16 tiles for packed weights (see bf16_gemm_amx.h).
#include "backend/cpu/bf16_gemm_amx.h"

#include <immintrin.h>

#include <algorithm>

#include "backend/cpu/aligned_buffer.h"
#include "backend/cpu/amx_tiles.h"
#include "backend/cpu/onednn_gemm.h"

namespace diffq::backend::cpu {

namespace {

constexpr int64_t kBlock = 32;     // rows and columns of a block: 2 x 2 tiles of 16 x 16 f32
constexpr int64_t kStepK = 32;     // k per tile step (16 pairs)
constexpr int64_t kPairRow = 256;  // bytes of a packed row of k pairs (64 columns x 2 x bf16)
constexpr int64_t kStepBytes = 16 * kPairRow;  // one step of a 64-column panel
static_assert(kOnednnPackedCols == 64, "the tiles read oneDNN's 64-column panels");

// X's chunk (rows of a row group x a K chunk) kept in L2 while the part's column blocks go by; the row groups'
// rows; the f32 partial sums of a column group (when K takes more than one chunk) at most this many floats (4 MB
// a thread: they stream through L3; measured a little faster than 1 MB groups, which reload X's chunks more often).
// Measured on an AMX Xeon with 2 MB of L2 a core (bench_int8_linear's fluxw_ / wan_linear_bf16_packed): chunks of
// 768 KB beat 512 KB and 1 MB; row groups of 256 beat 128 and 512.
constexpr int64_t kChunkBytes = 768 * 1024;
constexpr int64_t kRowGroup = 256;
constexpr int64_t kPartialFloats = 1024 * 1024;

// The packed B of columns [j, j + 32) (j a multiple of 32) at step s: the two tiles at +0 and +64 bytes,
// each 16 rows of 64 bytes at a stride of kPairRow.
inline const uint8_t* b_tiles(const uint16_t* wp, int64_t kp, int64_t j, int64_t s) {
  return reinterpret_cast<const uint8_t*>(wp + (j / kOnednnPackedCols) * kp * kOnednnPackedCols) + s * kStepBytes +
         (j % kOnednnPackedCols) * 4;
}

// Prefetches into L2 the lines [l0, l1) of a 32-column block's chunk of B (at b, its first step): 2 lines per
// row of k pairs, 16 rows per step.
inline void prefetch_b_lines(const uint8_t* b, int64_t l0, int64_t l1) {
  for (int64_t l = l0; l < l1; ++l)
    _mm_prefetch(reinterpret_cast<const char*>(b + (l >> 5) * kStepBytes + ((l >> 1) & 15) * kPairRow + (l & 1) * 64),
                 _MM_HINT_T1);
}

// Lines of B to prefetch while one block runs.
struct Prefetch {
  const uint8_t* b = nullptr;  // the next block's chunk (null: none)
  int64_t l0 = 0, l1 = 0;
};

// One K chunk of a 32 x 32 block: tiles 0-3 the accumulators (zeroed, or loaded from `partial` when it is set:
// 4 KB, rows of 32 floats), 4 / 5 X's rows [0, 16) / [16, 32) (a, row stride lda bytes), 6 / 7 B's columns
// [0, 16) / [16, 32); `steps` steps of 32 k. The sums are stored to out (rows of 32 floats).
DIFFQ_AMX_TARGET void block_chunk(const uint8_t* a, int64_t lda, const uint8_t* b, int64_t steps, const float* partial,
                                  float* out, const Prefetch& pf) {
  constexpr int64_t ldc = kBlock * 4;
  if (partial) {
    _tile_loadd(0, partial, ldc);
    _tile_loadd(1, partial + 16, ldc);
    _tile_loadd(2, partial + 16 * kBlock, ldc);
    _tile_loadd(3, partial + 16 * kBlock + 16, ldc);
  } else {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
  }
  const uint8_t* a1 = a + 16 * lda;
  const int64_t per_step = pf.b ? (pf.l1 - pf.l0 + steps - 1) / steps : 0;
  int64_t l = pf.l0;
  for (int64_t s = 0; s < steps; ++s, b += kStepBytes) {
    _tile_loadd(4, a + s * 64, lda);
    _tile_loadd(6, b, kPairRow);
    _tile_dpbf16ps(0, 4, 6);
    _tile_loadd(7, b + 64, kPairRow);
    _tile_dpbf16ps(1, 4, 7);
    _tile_loadd(5, a1 + s * 64, lda);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
    if (per_step) {
      const int64_t e = std::min(pf.l1, l + per_step);
      prefetch_b_lines(pf.b, l, e);
      l = e;
    }
  }
  _tile_stored(0, out, ldc);
  _tile_stored(1, out + 16, ldc);
  _tile_stored(2, out + 16 * kBlock, ldc);
  _tile_stored(3, out + 16 * kBlock + 16, ldc);
}

}  // namespace

// (GCC 12's shift / conversion intrinsics pass _mm512_undefined_*(), a self-initialised variable, as the unused
// merge source: -Wmaybe-uninitialized flags every inlined use.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
namespace {
// f32_to_bf16 on 16 lanes, as 16-bit lanes.
DIFFQ_AMX_TARGET inline __m256i round_to_bf16(__m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
  r = _mm512_mask_mov_epi32(r, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), _mm512_set1_epi32(0x7fc0));
  return _mm512_cvtepi32_epi16(r);
}
}  // namespace

DIFFQ_AMX_TARGET void amx_bf16_block_to_bf16(const float* c, int64_t rows, int64_t cols, const float* bias,
                                             uint16_t* y, int64_t ldy) {
  const __mmask16 m0 = __mmask16(cols >= 16 ? 0xffffu : (1u << cols) - 1u);
  const __mmask16 m1 = __mmask16(cols >= 32 ? 0xffffu : cols <= 16 ? 0u : (1u << (cols - 16)) - 1u);
  for (int64_t i = 0; i < rows; ++i) {
    const float* r = c + i * kBlock;
    uint16_t* d = y + i * ldy;
    __m512 v0 = _mm512_load_ps(r), v1 = _mm512_load_ps(r + 16);
    if (bias) {  // (no bias: no + 0, which would turn -0 into +0)
      v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(m0, bias));
      v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(m1, bias + 16));
    }
    _mm256_mask_storeu_epi16(d, m0, round_to_bf16(v0));
    _mm256_mask_storeu_epi16(d + 16, m1, round_to_bf16(v1));
  }
}

#pragma GCC diagnostic pop

void amx_bf16_packed_gemm_part(int64_t k, const uint16_t* x, int64_t ldx, const uint16_t* w_packed, int64_t r0,
                               int64_t r1, int64_t c0, int64_t c1, const AmxF32BlockDone& done) {
  if (r1 <= r0 || c1 <= c0 || k <= 0) return;
  const int64_t kp = (k + kStepK - 1) / kStepK * kStepK, total_steps = kp / kStepK;
  thread_local AlignedBuffer<uint16_t> abuf;
  thread_local AlignedBuffer<float> pbuf;
  alignas(64) float out[kBlock * kBlock];
  amx_load_tile_config();
  for (int64_t g0 = r0; g0 < r1; g0 += kRowGroup) {
    const int64_t rows = std::min(kRowGroup, r1 - g0), blocks_i = (rows + kBlock - 1) / kBlock;
    // K chunks of equal steps, each chunk of X's rows within kChunkBytes.
    const int64_t max_steps = std::max<int64_t>(1, kChunkBytes / (blocks_i * kBlock * kStepK * 2));
    const int64_t chunks = (total_steps + max_steps - 1) / max_steps;
    const int64_t chunk_steps = (total_steps + chunks - 1) / chunks;
    // Column groups whose partial sums fit kPartialFloats (one group when K is one chunk).
    const int64_t group_cols =
        chunks == 1 ? c1 - c0
                    : std::max<int64_t>(kOnednnPackedCols, kPartialFloats / (blocks_i * kBlock) / kOnednnPackedCols *
                                                                kOnednnPackedCols);
    float* const partial = chunks > 1 ? pbuf.get(size_t(blocks_i * kBlock * group_cols)) : nullptr;
    const bool in_place = rows % kBlock == 0 && (ldx * 2) % 64 == 0 &&
                          reinterpret_cast<uintptr_t>(x + g0 * ldx) % 64 == 0;
    for (int64_t cg = c0; cg < c1; cg += group_cols) {
      const int64_t cg1 = std::min(c1, cg + group_cols), blocks_j = (cg1 - cg + kBlock - 1) / kBlock;
      for (int64_t ch = 0; ch < chunks; ++ch) {
        const int64_t s0 = ch * chunk_steps, s1 = std::min(total_steps, s0 + chunk_steps), steps = s1 - s0;
        const int64_t k0 = s0 * kStepK, k1 = std::min(k, s1 * kStepK);
        const uint8_t* a;
        int64_t lda;
        if (in_place && k1 - k0 == steps * kStepK) {
          a = reinterpret_cast<const uint8_t*>(x + g0 * ldx + k0);
          lda = ldx * 2;
        } else {
          const int64_t ld = chunk_steps * kStepK;
          uint16_t* d = abuf.get(size_t(blocks_i * kBlock * ld));
          amx_copy_padded_rows(x + g0 * ldx + k0, ldx * 2, rows, (k1 - k0) * 2, ld * 2, d);
          a = reinterpret_cast<const uint8_t*>(d);
          lda = ld * 2;
        }
        const bool first = ch == 0, last = ch + 1 == chunks;
        const int64_t lines = steps * 32, per_block = (lines + blocks_i - 1) / blocks_i;
        for (int64_t jb = 0; jb < blocks_j; ++jb) {
          const int64_t j = cg + jb * kBlock;
          const uint8_t* b = b_tiles(w_packed, kp, j, s0);
          Prefetch pf;
          if (jb + 1 < blocks_j) pf.b = b_tiles(w_packed, kp, j + kBlock, s0);
          for (int64_t ib = 0; ib < blocks_i; ++ib) {
            float* p = partial ? partial + (ib * blocks_j + jb) * kBlock * kBlock : nullptr;
            if (pf.b) pf.l0 = std::min(lines, ib * per_block), pf.l1 = std::min(lines, (ib + 1) * per_block);
            block_chunk(a + ib * kBlock * lda, lda, b, steps, first ? nullptr : p, last ? out : p, pf);
            if (last) done(out, g0 + ib * kBlock, std::min(kBlock, rows - ib * kBlock), j, std::min(kBlock, cg1 - j));
          }
        }
      }
    }
  }
  amx_release_tiles();
}

}  // namespace diffq::backend::cpu
