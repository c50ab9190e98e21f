// The bf16-pair GEMM of bf16_dot_gemm.h: packing into bf16 pairs, the 6 x 32 register tile on
// vdpbf16ps, and the cache blocking of sgemm_kernel.cpp (K blocks of at most 256, 144-row A blocks,
// 3072-column B blocks). Compiled for AVX512-BF16 with function target attributes (Highway 1.0 has no
// bf16 dot-product op); only called where bf16_dot_gemm_usable().
#include "backend/cpu/bf16_dot_gemm.h"

#include "backend/cpu/hwy_config.h"
#include <hwy/aligned_allocator.h>
#include <hwy/targets.h>
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "backend/cpu/cpu_features.h"

#define DIFFQ_BF16_DOT_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

namespace diffq::backend::cpu {

namespace {

constexpr int64_t kMR = 6;     // rows of the register tile (one packed A strip)
constexpr int64_t kNR = 32;    // columns of the register tile (two vectors of 16 f32 lanes)
constexpr int64_t kKc = 256;   // most depth of a K block: a B panel is 128 pairs x 32 columns = 16 KiB (L1)
constexpr int64_t kMc = 144;   // rows of a packed A block (72 KiB at full depth: L2)
constexpr int64_t kNc = 3072;  // columns of a packed B block (1.5 MiB at full depth: L2 / L3)

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

struct Buffer {
  hwy::AlignedFreeUniquePtr<uint32_t[]> data;
  size_t size = 0;
  uint32_t* get(size_t n) {
    if (n > size) {
      data = hwy::AllocateAligned<uint32_t>(n);
      size = n;
    }
    return data.get();
  }
};

// op(A)[i0 + r, k0 + kk] for r < mc, kk < kc -> strips of kMR rows of kp = ceil(kc / 2) pairs:
// dst[(r / kMR) * kp * kMR + p * kMR + r % kMR] = (op(A)[r, 2p], op(A)[r, 2p + 1]); rows past mc and the
// element past an odd kc are zero.
void pack_a(bool trans_a, const uint16_t* a, int64_t lda, int64_t i0, int64_t mc, int64_t k0, int64_t kc,
            uint32_t* dst) {
  const int64_t kp = (kc + 1) / 2, full = kc / 2;
  for (int64_t s = 0; s < mc; s += kMR) {
    uint32_t* out = dst + s * kp;
    const int64_t rows = std::min(kMR, mc - s);
    for (int64_t r = 0; r < kMR; ++r) {
      if (r >= rows) {
        for (int64_t p = 0; p < kp; ++p) out[p * kMR + r] = 0;
        continue;
      }
      const int64_t i = i0 + s + r;
      if (!trans_a) {
        const uint16_t* row = a + i * lda + k0;
        for (int64_t p = 0; p < full; ++p) out[p * kMR + r] = load_pair(row + 2 * p);
        if (kc % 2) out[full * kMR + r] = row[kc - 1];
      } else {  // op(A)[i, kk] = a[kk * lda + i]
        const uint16_t* col = a + k0 * lda + i;
        for (int64_t p = 0; p < full; ++p) out[p * kMR + r] = pair(col[2 * p * lda], col[(2 * p + 1) * lda]);
        if (kc % 2) out[full * kMR + r] = col[(kc - 1) * lda];
      }
    }
  }
}

// op(B)[k0 + kk, j0 + j] for kk < kc, j < nc -> panels of kNR columns of kp pairs:
// dst[(j / kNR) * kp * kNR + p * kNR + j % kNR] = (op(B)[2p, j], op(B)[2p + 1, j]); columns past nc and
// the element past an odd kc are zero.
void pack_b(bool trans_b, const uint16_t* b, int64_t ldb, int64_t j0, int64_t nc, int64_t k0, int64_t kc,
            uint32_t* dst) {
  const int64_t kp = (kc + 1) / 2, full = kc / 2;
  for (int64_t q = 0; q < nc; q += kNR) {
    uint32_t* out = dst + q * kp;
    const int64_t cols = std::min(kNR, nc - q);
    if (trans_b) {  // op(B)[kk, j] = b[j * ldb + kk]: a column of op(B) is a contiguous row of b
      for (int64_t j = 0; j < kNR; ++j) {
        if (j >= cols) {
          for (int64_t p = 0; p < kp; ++p) out[p * kNR + j] = 0;
          continue;
        }
        const uint16_t* col = b + (j0 + q + j) * ldb + k0;
        for (int64_t p = 0; p < full; ++p) out[p * kNR + j] = load_pair(col + 2 * p);
        if (kc % 2) out[full * kNR + j] = col[kc - 1];
      }
    } else {  // rows 2p and 2p + 1 of op(B) interleaved
      for (int64_t p = 0; p < kp; ++p) {
        const uint16_t* r0 = b + (k0 + 2 * p) * ldb + j0 + q;
        const uint16_t* r1 = 2 * p + 1 < kc ? r0 + ldb : nullptr;
        for (int64_t j = 0; j < kNR; ++j)
          out[p * kNR + j] = j < cols ? pair(r0[j], r1 ? r1[j] : uint16_t(0)) : 0;
      }
    }
  }
}

// One full row of a tile: c[0, 32) = alpha * (x0, x1) + beta * c (beta == 0: c not read).
DIFFQ_BF16_DOT_TARGET inline void store_row(float* c, __m512 x0, __m512 x1, __m512 va, float beta) {
  if (beta == 0.0f) {
    _mm512_storeu_ps(c, _mm512_mul_ps(va, x0));
    _mm512_storeu_ps(c + 16, _mm512_mul_ps(va, x1));
  } else {
    const __m512 vb = _mm512_set1_ps(beta);
    _mm512_storeu_ps(c, _mm512_fmadd_ps(va, x0, _mm512_mul_ps(vb, _mm512_loadu_ps(c))));
    _mm512_storeu_ps(c + 16, _mm512_fmadd_ps(va, x1, _mm512_mul_ps(vb, _mm512_loadu_ps(c + 16))));
  }
}

// C tile [mr, nr] = alpha * (packed A strip . packed B panel over kp pairs) + beta * C (beta == 0: C not
// read). Full tiles are stored from the registers; edge tiles through a buffer.
DIFFQ_BF16_DOT_TARGET __attribute__((noinline)) void tile(int64_t kp, const uint32_t* __restrict ap,
                                                          const uint32_t* __restrict bp, float* c, int64_t ldc,
                                                          float alpha, float beta, int64_t mr, int64_t nr) {
  for (int64_t r = 0; r < mr; ++r) {
    __builtin_prefetch(c + r * ldc, 1);
    __builtin_prefetch(c + r * ldc + nr - 1, 1);
  }
  __m512 c00 = _mm512_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00, c31 = c00,
         c40 = c00, c41 = c00, c50 = c00, c51 = c00;
#define DIFFQ_BF16_DOT_ROW(r)                                                   \
  {                                                                             \
    const __m512bh av = (__m512bh)_mm512_set1_epi32(int(ap[r]));                \
    c##r##0 = _mm512_dpbf16_ps(c##r##0, av, b0);                                \
    c##r##1 = _mm512_dpbf16_ps(c##r##1, av, b1);                                \
  }
#pragma GCC unroll 4
  for (int64_t p = 0; p < kp; ++p, ap += kMR, bp += kNR) {
    const __m512bh b0 = (__m512bh)_mm512_load_si512(bp), b1 = (__m512bh)_mm512_load_si512(bp + 16);
    DIFFQ_BF16_DOT_ROW(0) DIFFQ_BF16_DOT_ROW(1) DIFFQ_BF16_DOT_ROW(2) DIFFQ_BF16_DOT_ROW(3)
    DIFFQ_BF16_DOT_ROW(4) DIFFQ_BF16_DOT_ROW(5)
  }
#undef DIFFQ_BF16_DOT_ROW
  const __m512 va = _mm512_set1_ps(alpha);
  if (mr == kMR && nr == kNR) {
    store_row(c, c00, c01, va, beta);
    store_row(c + ldc, c10, c11, va, beta);
    store_row(c + 2 * ldc, c20, c21, va, beta);
    store_row(c + 3 * ldc, c30, c31, va, beta);
    store_row(c + 4 * ldc, c40, c41, va, beta);
    store_row(c + 5 * ldc, c50, c51, va, beta);
    return;
  }
  alignas(64) float t[kMR * kNR];
  const __m512 acc[kMR][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}, {c40, c41}, {c50, c51}};
  for (int64_t r = 0; r < kMR; ++r) {
    _mm512_store_ps(t + r * kNR, _mm512_mul_ps(va, acc[r][0]));
    _mm512_store_ps(t + r * kNR + 16, _mm512_mul_ps(va, acc[r][1]));
  }
  for (int64_t r = 0; r < mr; ++r)
    for (int64_t j = 0; j < nr; ++j) {
      float& x = c[r * ldc + j];
      x = beta == 0.0f ? t[r * kNR + j] : t[r * kNR + j] + beta * x;
    }
}

}  // namespace

bool bf16_dot_gemm_usable() {
  const CpuFeatures& f = cpu_features();
  if (!(f.avx512_bf16 && f.avx512f && f.avx512bw && f.avx512vl)) return false;
  // SupportedTargets() honours DIFFQ_SIMD_TARGET (force_simd_target): a forced AVX2 / EMU128 run keeps
  // the widening kernels.
  return (hwy::SupportedTargets() & (HWY_AVX3 | HWY_AVX3_DL)) != 0;
}

void gemm_bf16_dot(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a,
                   int64_t lda, const uint16_t* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
    return;
  }
  thread_local Buffer abuf, bbuf;
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
      pack_b(trans_b, b, ldb, jc, nc, pc, kc, bp);
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

}  // namespace diffq::backend::cpu
