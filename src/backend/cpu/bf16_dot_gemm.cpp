// The bf16-pair GEMM of bf16_dot_gemm.h: packing into bf16 pairs, the 8 x 32 register tile on
// vdpbf16ps, and BLIS-style cache blocking as sgemm_kernel.cpp (K blocks of at most 256 = 128 pairs,
// 144-row A blocks, 512-column B blocks). Compiled for AVX512-BF16 with function target attributes
// (Highway 1.0 has no bf16 dot-product op); only called where bf16_dot_gemm_usable().
#include "backend/cpu/bf16_dot_gemm.h"
#include "backend/cpu/simd_targets.h"

#include "backend/cpu/hwy_config.h"
#include <hwy/targets.h>

#include <algorithm>
#include <cstring>

#include "backend/cpu/aligned_buffer.h"
#include "backend/cpu/bf16_dot_target.h"
#include "backend/cpu/cpu_features.h"

namespace diffq::backend::cpu {

namespace {

// Chosen on a Zen 5 EPYC (L1 48 KiB, L2 1 MiB) among tiles 6 x 32, 12 x 32, 6 x 64, 4 x 64, 8 x 48 and
// kKc 384 / 512, kNc 768 / 1536 / 3072 (a throwaway harness on FLUX.1-width linears, not kept); what
// the kept benchmark shows: docs/benchmarks.md "Session 8".
constexpr int64_t kMR = 8;    // rows of the register tile (16 accumulators: enough in flight for two
                              // vdpbf16ps pipes of latency ~6)
constexpr int64_t kNR = 32;   // columns of the register tile (two vectors of 16 f32 lanes)
constexpr int64_t kKc = 256;  // most depth of a K block: a B panel is 128 pairs x 32 columns = 16 KiB (L1)
constexpr int64_t kMc = 144;  // rows of a packed A block (72 KiB at full depth: L2)
constexpr int64_t kNc = 512;  // columns of a packed B block (256 KiB at full depth: L2)
static_assert(kMc % kMR == 0 && kNc % kNR == 0, "blocks hold whole strips and panels");

// K split into equal blocks of at most kKc (as sgemm_kernel.cpp); a block of odd depth has its last
// pair padded with a zero.
int64_t k_block(int64_t k) {
  const int64_t blocks = (k + kKc - 1) / kKc;
  return (k + blocks - 1) / blocks;
}

uint32_t pair(uint16_t lo, uint16_t hi) { return uint32_t(lo) | (uint32_t(hi) << 16); }
uint32_t load_pair(const uint16_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);  // little-endian: p[0] in the low half
  return v;
}

// Eight rows of eight 32-bit pairs (src[i] + 0..7 for i < 8) transposed into dst[j * ld + i]: the
// packs' inner step (unpack 32 / 64, then swap 128-bit halves).
DIFFQ_BF16_DOT_TARGET inline void transpose8x8(const uint16_t* const (&src)[8], int64_t off, uint32_t* dst,
                                               int64_t ld) {
  __m256i r[8], t[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src[i] + off));
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_epi32(r[i], r[i + 1]);      // per half: (i, 0) (i+1, 0) (i, 1) (i+1, 1)
    t[i + 1] = _mm256_unpackhi_epi32(r[i], r[i + 1]);  // (i, 2) (i+1, 2) (i, 3) (i+1, 3)
  }
  for (int g = 0; g < 8; g += 4) {
    r[g] = _mm256_unpacklo_epi64(t[g], t[g + 2]);          // column 0 | 4 of rows g..g+3
    r[g + 1] = _mm256_unpackhi_epi64(t[g], t[g + 2]);      // column 1 | 5
    r[g + 2] = _mm256_unpacklo_epi64(t[g + 1], t[g + 3]);  // column 2 | 6
    r[g + 3] = _mm256_unpackhi_epi64(t[g + 1], t[g + 3]);  // column 3 | 7
  }
  for (int j = 0; j < 4; ++j) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + j * ld), _mm256_permute2x128_si256(r[j], r[4 + j], 0x20));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + (j + 4) * ld),
                        _mm256_permute2x128_si256(r[j], r[4 + j], 0x31));
  }
}

// op(A)[i0 + r, k0 + kk] for r < mc, kk < kc -> strips of kMR rows of kp = ceil(kc / 2) pairs:
// dst[(r / kMR) * kp * kMR + p * kMR + r % kMR] = (op(A)[r, 2p], op(A)[r, 2p + 1]); rows past mc and the
// element past an odd kc are zero.
DIFFQ_BF16_DOT_TARGET void pack_a(bool trans_a, const uint16_t* a, int64_t lda, int64_t i0, int64_t mc, int64_t k0,
                                   int64_t kc, uint32_t* dst) {
  const int64_t kp = (kc + 1) / 2, full = kc / 2;
  for (int64_t s = 0; s < mc; s += kMR) {
    uint32_t* out = dst + s * kp;
    const int64_t rows = std::min(kMR, mc - s);
    if (!trans_a && rows == kMR) {  // whole strips: 8 x 8 pair blocks, the rest below
      static_assert(kMR == 8, "transpose8x8 packs 8-row strips");
      const uint16_t* src[8];
      for (int64_t r = 0; r < 8; ++r) src[r] = a + (i0 + s + r) * lda + k0;
      for (int64_t p = 0; p + 8 <= full; p += 8) transpose8x8(src, 2 * p, out + p * kMR, kMR);
    }
    for (int64_t r = 0; r < kMR; ++r) {
      if (r >= rows) {
        for (int64_t p = 0; p < kp; ++p) out[p * kMR + r] = 0;
        continue;
      }
      const int64_t i = i0 + s + r;
      if (!trans_a) {
        const uint16_t* row = a + i * lda + k0;
        for (int64_t p = rows == kMR ? full / 8 * 8 : 0; p < full; ++p) out[p * kMR + r] = load_pair(row + 2 * p);
        if (kc % 2) out[full * kMR + r] = row[kc - 1];
      } else {  // op(A)[i, kk] = a[kk * lda + i]
        const uint16_t* col = a + k0 * lda + i;
        for (int64_t p = 0; p < full; ++p) out[p * kMR + r] = pair(col[2 * p * lda], col[(2 * p + 1) * lda]);
        if (kc % 2) out[full * kMR + r] = col[(kc - 1) * lda];
      }
    }
  }
}

// op(B) as the packs read it: stored [n, k] (trans), [k, n] with row stride ld, or by row pointers
// (row kk at rows[kk] + col0: an implicit convolution's shifted input rows).
struct BOperand {
  bool trans = false;
  const uint16_t* b = nullptr;
  int64_t ld = 0;
  const uint16_t* const* rows = nullptr;
  int64_t col0 = 0;
  const uint16_t* row(int64_t kk) const { return rows ? rows[kk] + col0 : b + kk * ld; }
};

// op(B)[k0 + kk, j0 + j] for kk < kc, j < nc -> panels of kNR columns of kp pairs:
// dst[(j / kNR) * kp * kNR + p * kNR + j % kNR] = (op(B)[2p, j], op(B)[2p + 1, j]); columns past nc and
// the element past an odd kc are zero.
DIFFQ_BF16_DOT_TARGET void pack_b(const BOperand& B, int64_t j0, int64_t nc, int64_t k0, int64_t kc, uint32_t* dst) {
  const int64_t kp = (kc + 1) / 2, full = kc / 2;
  if (!B.trans) {
    // Rows 2p and 2p + 1 of op(B) interleaved, row pair by row pair across all panels, so that each row
    // is read front to back (the prefetchers follow; panel by panel, every row would be a new stream):
    // 32 columns of the two rows by one two-source permute per 16 pairs, the last partial panel by element.
    const __m512i lo = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8, 39, 7, 38, 6, 37,
                                        5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
    const __m512i hi = _mm512_add_epi16(lo, _mm512_set1_epi16(16));
    const int64_t whole = nc / kNR * kNR;
    for (int64_t p = 0; p < kp; ++p) {
      const uint16_t* r0 = B.row(k0 + 2 * p) + j0;
      const uint16_t* r1 = 2 * p + 1 < kc ? B.row(k0 + 2 * p + 1) + j0 : nullptr;
      int64_t q = 0;
      if (r1) {
        for (; q < whole; q += kNR) {
          uint32_t* out = dst + q * kp + p * kNR;
          const __m512i x0 = _mm512_loadu_si512(r0 + q), x1 = _mm512_loadu_si512(r1 + q);
          _mm512_store_si512(out, _mm512_permutex2var_epi16(x0, lo, x1));
          _mm512_store_si512(out + 16, _mm512_permutex2var_epi16(x0, hi, x1));
        }
      }
      for (; q < nc; q += kNR) {
        uint32_t* out = dst + q * kp + p * kNR;
        const int64_t cols = std::min(kNR, nc - q);
        for (int64_t j = 0; j < kNR; ++j) out[j] = j < cols ? pair(r0[q + j], r1 ? r1[q + j] : uint16_t(0)) : 0;
      }
    }
    return;
  }
  // op(B)[kk, j] = b[j * ld + kk]: a column of op(B) is a contiguous row of b.
  const uint16_t* b = B.b;
  const int64_t ldb = B.ld;
  for (int64_t q = 0; q < nc; q += kNR) {
    uint32_t* out = dst + q * kp;
    const int64_t cols = std::min(kNR, nc - q);
    if (cols == kNR) {  // whole panels: 8 x 8 pair blocks, the rest below
      for (int64_t g = 0; g < kNR; g += 8) {
        const uint16_t* src[8];
        for (int64_t j = 0; j < 8; ++j) src[j] = b + (j0 + q + g + j) * ldb + k0;
        for (int64_t p = 0; p + 8 <= full; p += 8) transpose8x8(src, 2 * p, out + p * kNR + g, kNR);
      }
    }
    for (int64_t j = 0; j < kNR; ++j) {
      if (j >= cols) {
        for (int64_t p = 0; p < kp; ++p) out[p * kNR + j] = 0;
        continue;
      }
      const uint16_t* col = b + (j0 + q + j) * ldb + k0;
      for (int64_t p = cols == kNR ? full / 8 * 8 : 0; p < full; ++p) out[p * kNR + j] = load_pair(col + 2 * p);
      if (kc % 2) out[full * kNR + j] = col[kc - 1];
    }
  }
}

// c[0, 16) = alpha * x + beta * c (beta == 0: c not read).
DIFFQ_BF16_DOT_TARGET inline void store16(float* c, __m512 x, __m512 va, float beta) {
  if (beta == 0.0f)
    _mm512_storeu_ps(c, _mm512_mul_ps(va, x));
  else
    _mm512_storeu_ps(c, _mm512_fmadd_ps(va, x, _mm512_mul_ps(_mm512_set1_ps(beta), _mm512_loadu_ps(c))));
}

// C tile [mr, nr] = alpha * (packed A strip . packed B panel over kp pairs) + beta * C (beta == 0: C not
// read): MR x NR / 16 accumulators, per pair NR / 16 panel loads and MR broadcasts. Full tiles are
// stored from the registers; edge tiles through a buffer.
DIFFQ_BF16_DOT_TARGET __attribute__((noinline)) void tile(int64_t kp, const uint32_t* __restrict ap,
                                                          const uint32_t* __restrict bp, float* c, int64_t ldc,
                                                          float alpha, float beta, int64_t mr, int64_t nr) {
  constexpr int64_t MR = kMR, NR = kNR, NV = NR / 16;
  for (int64_t r = 0; r < mr; ++r) {
    __builtin_prefetch(c + r * ldc, 1);
    __builtin_prefetch(c + r * ldc + nr - 1, 1);
  }
  __m512 acc[MR][NV];
#pragma GCC unroll 16
  for (int64_t r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int64_t v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
#pragma GCC unroll 2
  for (int64_t p = 0; p < kp; ++p, ap += MR, bp += NR) {
    __m512bh bv[NV];
#pragma GCC unroll 4
    for (int64_t v = 0; v < NV; ++v) bv[v] = (__m512bh)_mm512_load_si512(bp + 16 * v);
#pragma GCC unroll 16
    for (int64_t r = 0; r < MR; ++r) {
      const __m512bh av = (__m512bh)_mm512_set1_epi32(int(ap[r]));
#pragma GCC unroll 4
      for (int64_t v = 0; v < NV; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], av, bv[v]);
    }
  }
  const __m512 va = _mm512_set1_ps(alpha);
  if (mr == MR && nr == NR) {
#pragma GCC unroll 16
    for (int64_t r = 0; r < MR; ++r)
#pragma GCC unroll 4
      for (int64_t v = 0; v < NV; ++v) store16(c + r * ldc + 16 * v, acc[r][v], va, beta);
    return;
  }
  alignas(64) float t[MR * NR];
  for (int64_t r = 0; r < MR; ++r)
    for (int64_t v = 0; v < NV; ++v) _mm512_store_ps(t + r * NR + 16 * v, _mm512_mul_ps(va, acc[r][v]));
  for (int64_t r = 0; r < mr; ++r)
    for (int64_t j = 0; j < nr; ++j) {
      float& x = c[r * ldc + j];
      x = beta == 0.0f ? t[r * NR + j] : t[r * NR + j] + beta * x;
    }
}

// Fewer rows than a tile, B stored [n, k] (a linear's weight): C[i, j] = alpha * <A row i, B row j> +
// beta * C straight from the rows, 32 k at a time (the tail masked), 4 columns at once, no packing: a
// modulation GEMV ([1, 3072] x [18432, 3072]^T) reads its weight once and is bound by that read.
DIFFQ_BF16_DOT_TARGET void few_rows_nt(int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a,
                                       int64_t lda, const uint16_t* b, int64_t ldb, float beta, float* c,
                                       int64_t ldc) {
  constexpr int64_t kCols = 4;
  const __mmask32 tail = k % 32 ? __mmask32((uint64_t(1) << (k % 32)) - 1) : __mmask32(0xffffffffu);
  for (int64_t j0 = 0; j0 < n; j0 += kCols) {
    const int64_t cols = std::min(kCols, n - j0);
    __m512 acc[kMR - 1][kCols];
    for (int64_t i = 0; i < m; ++i)
      for (int64_t q = 0; q < kCols; ++q) acc[i][q] = _mm512_setzero_ps();
    for (int64_t p = 0; p < k; p += 32) {
      const __mmask32 mask = p + 32 <= k ? __mmask32(0xffffffffu) : tail;
      __m512bh bv[kCols];
      for (int64_t q = 0; q < kCols; ++q)
        bv[q] = (__m512bh)_mm512_maskz_loadu_epi16(mask, b + (j0 + std::min(q, cols - 1)) * ldb + p);
      for (int64_t i = 0; i < m; ++i) {
        const __m512bh av = (__m512bh)_mm512_maskz_loadu_epi16(mask, a + i * lda + p);
        for (int64_t q = 0; q < kCols; ++q) acc[i][q] = _mm512_dpbf16_ps(acc[i][q], av, bv[q]);
      }
    }
    for (int64_t i = 0; i < m; ++i)
      for (int64_t q = 0; q < cols; ++q) {
        float& x = c[i * ldc + j0 + q];
        alignas(64) float lanes[16];
        _mm512_store_ps(lanes, acc[i][q]);
        float sum = 0.0f;
        for (const float l : lanes) sum += l;
        const float v = alpha * sum;
        x = beta == 0.0f ? v : v + beta * x;
      }
  }
}

// Both entry points: C = beta * C for k <= 0, else the blocked product.
void blocked(bool trans_a, const BOperand& B, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a,
             int64_t lda, float beta, float* c, int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
    return;
  }
  thread_local AlignedBuffer<uint32_t> abuf, bbuf;
  const int64_t kb = k_block(k), kp_max = (kb + 1) / 2;
  const int64_t mc_max = std::min(kMc, (m + kMR - 1) / kMR * kMR);
  const int64_t nc_max = std::min(kNc, (n + kNR - 1) / kNR * kNR);
  uint32_t* ap = abuf.get(size_t(mc_max * kp_max));
  uint32_t* bp = bbuf.get(size_t(nc_max * kp_max));
  for (int64_t jc = 0; jc < n; jc += kNc) {
    const int64_t nc = std::min(kNc, n - jc);
    for (int64_t pc = 0; pc < k; pc += kb) {
      const int64_t kc = std::min(kb, k - pc), kp = (kc + 1) / 2;
      const float beta_p = pc == 0 ? beta : 1.0f;  // later K blocks add to the first one's C
      pack_b(B, jc, nc, pc, kc, bp);
      for (int64_t ic = 0; ic < m; ic += kMc) {
        const int64_t mc = std::min(kMc, m - ic);
        pack_a(trans_a, a, lda, ic, mc, pc, kc, ap);
        for (int64_t jr = 0; jr < nc; jr += kNR)
          for (int64_t ir = 0; ir < mc; ir += kMR)
            tile(kp, ap + ir * kp, bp + jr * kp, c + (ic + ir) * ldc + jc + jr, ldc, alpha, beta_p,
                 std::min(kMR, mc - ir), std::min(kNR, nc - jr));
      }
    }
  }
}

}  // namespace

bool bf16_dot_gemm_usable() {
  const CpuFeatures& f = cpu_features();
  if (!(f.avx512_bf16 && f.avx512f && f.avx512bw && f.avx512vl)) return false;
  // A forced lower target (DIFFQ_SIMD_TARGET, the tests' mocks) keeps the widening kernels.
  return simd_dispatch_is_avx512();
}

void gemm_bf16_dot(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a,
                   int64_t lda, const uint16_t* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m > 0 && n > 0 && k > 0 && m < kMR && !trans_a && trans_b)
    return few_rows_nt(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  BOperand B;
  B.trans = trans_b;
  B.b = b;
  B.ld = ldb;
  blocked(trans_a, B, m, n, k, alpha, a, lda, beta, c, ldc);
}

void gemm_bf16_dot_rows(bool trans_a, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a, int64_t lda,
                        const uint16_t* const* b_rows, int64_t b_col0, float beta, float* c, int64_t ldc) {
  BOperand B;
  B.rows = b_rows;
  B.col0 = b_col0;
  blocked(trans_a, B, m, n, k, alpha, a, lda, beta, c, ldc);
}

}  // namespace diffq::backend::cpu
