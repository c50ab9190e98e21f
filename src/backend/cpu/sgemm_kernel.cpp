// diffq's own f32 GEMM: packing, the 6 x (2 vectors) FMA register tile and the cache blocking under
// Highway runtime dispatch (see sgemm_kernel.h). The scalar oracle is sgemm_reference (gemm.h).
#include "backend/cpu/hwy_config.h"
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backend/cpu/sgemm_kernel.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "backend/cpu/simd-inl.h"

#include <algorithm>
#include <cstring>

#include "backend/cpu/aligned_buffer.h"
#include "backend/cpu/sgemm_kernel.h"

#ifndef DIFFQ_SGEMM_KERNEL_ONCE
#define DIFFQ_SGEMM_KERNEL_ONCE
namespace diffq::backend::cpu::sgemm_detail {

constexpr int64_t kMR = 6;     // rows of the register tile (one packed A strip)
// Measured on Zen 3 (L1 32 KiB, L2 512 KiB) against KC 320 / 384 / 512 and MC 72 / 288: within noise,
// this pair at least as fast on the FLUX shapes.
constexpr int64_t kKc = 256;   // most depth of a block: B panel 16 KiB (AVX2) in L1
constexpr int64_t kMc = 144;   // rows of a packed A block (144 KiB at full depth: L2)
constexpr int64_t kNc = 3072;  // columns of a packed B block (3 MiB at full depth: L3)
static_assert(kMc % kMR == 0 && kNc % 32 == 0, "blocks hold whole strips and panels");

inline float widen(float x) { return x; }
inline float widen(uint16_t x) {
  const uint32_t u = uint32_t(x) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// K split into equal blocks of at most kKc: 768 -> 3 x 256, 3840 -> 15 x 256, 300 -> 2 x 150.
inline int64_t k_block(int64_t k) {
  const int64_t blocks = (k + kKc - 1) / kKc;
  return (k + blocks - 1) / blocks;
}


// C = beta * C (k == 0); beta == 0 writes zeros without reading C.
inline void scale_c(int64_t m, int64_t n, float beta, float* c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
}

}  // namespace diffq::backend::cpu::sgemm_detail
#endif

HWY_BEFORE_NAMESPACE();
namespace diffq::backend::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using namespace sgemm_detail;

using DF = hn::CappedTag<float, 16>;
constexpr int64_t kLanes = int64_t(hn::MaxLanes(DF()));
constexpr int64_t kNR = 2 * kLanes;  // columns of the register tile (one packed B panel)

// op(A)[i0 + r, k0 + kk] for r < mc, kk < kc -> strips of kMR rows: dst[(r / kMR) * kc * kMR + kk * kMR +
// r % kMR]; rows past mc in the last strip are zero.
template <class T>
void PackA(bool trans_a, const T* a, int64_t lda, int64_t i0, int64_t mc, int64_t k0, int64_t kc, float* dst) {
  for (int64_t s = 0; s < mc; s += kMR) {
    float* out = dst + s * kc;
    const int64_t rows = std::min(kMR, mc - s);
    if (!trans_a) {
      const T* src[kMR];
      for (int64_t r = 0; r < rows; ++r) src[r] = a + (i0 + s + r) * lda + k0;
      if (rows == kMR) {
        for (int64_t kk = 0; kk < kc; ++kk)
          for (int64_t r = 0; r < kMR; ++r) out[kk * kMR + r] = widen(src[r][kk]);
      } else {
        for (int64_t kk = 0; kk < kc; ++kk)
          for (int64_t r = 0; r < kMR; ++r) out[kk * kMR + r] = r < rows ? widen(src[r][kk]) : 0.0f;
      }
    } else {  // op(A)[i, p] = a[p * lda + i]: a strip's rows are contiguous in each row of a
      for (int64_t kk = 0; kk < kc; ++kk) {
        const T* row = a + (k0 + kk) * lda + i0 + s;
        for (int64_t r = 0; r < kMR; ++r) out[kk * kMR + r] = r < rows ? widen(row[r]) : 0.0f;
      }
    }
  }
}

#if HWY_MAX_BYTES >= 32  // 8-lane f32 vectors: AVX2 and AVX-512 (not the 128-bit EMU128 / SSE targets)
// Eight floats at p (bf16: widened).
template <class D>
HWY_INLINE hn::Vec<D> Load8(D d, const float* p) {
  return hn::LoadU(d, p);
}
template <class D>
HWY_INLINE hn::Vec<D> Load8(D d, const uint16_t* p) {
  return LoadBf16(d, p);
}

// In-register transpose of 8 rows of 8 floats (vectors with 128-bit blocks): r[i][j] -> r[j][i].
template <class D, class V>
HWY_INLINE void Transpose8(D d, V (&r)[8]) {
  const hn::Repartition<double, D> dd;
  auto lo64 = [&](V a, V b) { return hn::BitCast(d, hn::InterleaveLower(dd, hn::BitCast(dd, a), hn::BitCast(dd, b))); };
  auto hi64 = [&](V a, V b) { return hn::BitCast(d, hn::InterleaveUpper(dd, hn::BitCast(dd, a), hn::BitCast(dd, b))); };
  V t[8], u[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = hn::InterleaveLower(d, r[i], r[i + 1]);     // per block: (i, j), (i + 1, j) for j = 0, 1
    t[i + 1] = hn::InterleaveUpper(d, r[i], r[i + 1]); // ... for j = 2, 3
  }
  for (int i = 0; i < 8; i += 4) {
    u[i] = lo64(t[i], t[i + 2]);          // column 0 (block 0) / 4 (block 1) of rows i..i+3
    u[i + 1] = hi64(t[i], t[i + 2]);      // column 1 / 5
    u[i + 2] = lo64(t[i + 1], t[i + 3]);  // column 2 / 6
    u[i + 3] = hi64(t[i + 1], t[i + 3]);  // column 3 / 7
  }
  for (int j = 0; j < 4; ++j) {
    r[j] = hn::ConcatLowerLower(d, u[4 + j], u[j]);
    r[j + 4] = hn::ConcatUpperUpper(d, u[4 + j], u[j]);
  }
}
#endif

// op(B)[k0 + kk, j0 + j] for kk < kc, j < nc -> panels of kNR columns: dst[(j / kNR) * kc * kNR + kk * kNR +
// j % kNR]; columns past nc in the last panel are zero.
template <class T>
void PackB(bool trans_b, const T* b, int64_t ldb, int64_t j0, int64_t nc, int64_t k0, int64_t kc, float* dst) {
  for (int64_t q = 0; q < nc; q += kNR) {
    float* out = dst + q * kc;
    const int64_t cols = std::min(kNR, nc - q);
    if (trans_b) {  // op(B)[p, j] = b[j * ldb + p]: a column of op(B) is a contiguous row of b
      int64_t done = 0;
#if HWY_MAX_BYTES >= 32
      if constexpr (kLanes == 8) {
        // Full panels, 8 deep at a time: two 8 x 8 transposes (columns 0-7 and 8-15).
        const hn::FixedTag<float, 8> d8;
        if (cols == kNR) {
          for (; done + 8 <= kc; done += 8) {
            for (int64_t half = 0; half < 2; ++half) {
              hn::Vec<decltype(d8)> r[8];
              for (int64_t j = 0; j < 8; ++j) r[j] = Load8(d8, b + (j0 + q + 8 * half + j) * ldb + k0 + done);
              Transpose8(d8, r);
              for (int64_t kk = 0; kk < 8; ++kk) hn::Store(r[kk], d8, out + (done + kk) * kNR + 8 * half);
            }
          }
        }
      }
#endif
      for (int64_t j = 0; j < kNR; ++j) {
        if (j < cols) {
          const T* col = b + (j0 + q + j) * ldb + k0;
          for (int64_t kk = done; kk < kc; ++kk) out[kk * kNR + j] = widen(col[kk]);
        } else {
          for (int64_t kk = done; kk < kc; ++kk) out[kk * kNR + j] = 0.0f;
        }
      }
    } else {
      for (int64_t kk = 0; kk < kc; ++kk) {
        const T* row = b + (k0 + kk) * ldb + j0 + q;
        if (cols == kNR) {
          for (int64_t j = 0; j < kNR; ++j) out[kk * kNR + j] = widen(row[j]);
        } else {
          for (int64_t j = 0; j < kNR; ++j) out[kk * kNR + j] = j < cols ? widen(row[j]) : 0.0f;
        }
      }
    }
  }
}

// C tile [mr, nr] = alpha * (packed A strip x packed B panel over kc) + beta * C (beta == 0: C not
// read). Full tiles are stored from the registers; edge tiles through a buffer, element by element.
HWY_NOINLINE void Tile(int64_t kc, const float* HWY_RESTRICT ap, const float* HWY_RESTRICT bp, float* c, int64_t ldc,
                       float alpha, float beta, int64_t mr, int64_t nr) {
  const DF d;
  using V = hn::Vec<DF>;
  // C's rows are read (beta != 0, later K blocks) or written at the end: fetch them meanwhile.
  for (int64_t r = 0; r < mr; ++r) {
    __builtin_prefetch(c + r * ldc, 1);
    __builtin_prefetch(c + r * ldc + nr - 1, 1);
  }
  V c00 = hn::Zero(d), c01 = hn::Zero(d), c10 = hn::Zero(d), c11 = hn::Zero(d), c20 = hn::Zero(d),
    c21 = hn::Zero(d), c30 = hn::Zero(d), c31 = hn::Zero(d), c40 = hn::Zero(d), c41 = hn::Zero(d),
    c50 = hn::Zero(d), c51 = hn::Zero(d);
#define DIFFQ_SGEMM_ROW(r)                       \
  {                                              \
    const V av = hn::Set(d, ap[r]);              \
    c##r##0 = hn::MulAdd(av, b0, c##r##0);       \
    c##r##1 = hn::MulAdd(av, b1, c##r##1);       \
  }
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC unroll 4
#elif defined(__clang__)
#pragma unroll 4
#endif
  for (int64_t p = 0; p < kc; ++p, ap += kMR, bp += kNR) {
    const V b0 = hn::Load(d, bp), b1 = hn::Load(d, bp + kLanes);
    DIFFQ_SGEMM_ROW(0) DIFFQ_SGEMM_ROW(1) DIFFQ_SGEMM_ROW(2) DIFFQ_SGEMM_ROW(3) DIFFQ_SGEMM_ROW(4)
    DIFFQ_SGEMM_ROW(5)
  }
#undef DIFFQ_SGEMM_ROW
  const V va = hn::Set(d, alpha);
  if (mr == kMR && nr == kNR) {
    const V vb = hn::Set(d, beta);
    auto out = [&](float* cr, V x0, V x1) {
      if (beta == 0.0f) {
        hn::StoreU(hn::Mul(va, x0), d, cr);
        hn::StoreU(hn::Mul(va, x1), d, cr + kLanes);
      } else {
        hn::StoreU(hn::MulAdd(va, x0, hn::Mul(vb, hn::LoadU(d, cr))), d, cr);
        hn::StoreU(hn::MulAdd(va, x1, hn::Mul(vb, hn::LoadU(d, cr + kLanes))), d, cr + kLanes);
      }
    };
    out(c, c00, c01);
    out(c + ldc, c10, c11);
    out(c + 2 * ldc, c20, c21);
    out(c + 3 * ldc, c30, c31);
    out(c + 4 * ldc, c40, c41);
    out(c + 5 * ldc, c50, c51);
    return;
  }
  HWY_ALIGN float t[kMR * kNR];
  const V acc[kMR][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}, {c40, c41}, {c50, c51}};
  for (int64_t r = 0; r < kMR; ++r) {
    hn::Store(hn::Mul(va, acc[r][0]), d, t + r * kNR);
    hn::Store(hn::Mul(va, acc[r][1]), d, t + r * kNR + kLanes);
  }
  for (int64_t r = 0; r < mr; ++r)
    for (int64_t j = 0; j < nr; ++j) {
      float& x = c[r * ldc + j];
      x = beta == 0.0f ? t[r * kNR + j] : t[r * kNR + j] + beta * x;
    }
}

template <class T>
void Blocked(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const T* a, int64_t lda,
             const T* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  thread_local AlignedBuffer<float> abuf, bbuf;
  const int64_t kb = k_block(k);
  const int64_t mc_max = std::min(kMc, (m + kMR - 1) / kMR * kMR);
  const int64_t nc_max = std::min(kNc, (n + kNR - 1) / kNR * kNR);
  float* ap = abuf.get(size_t(mc_max * kb));
  float* bp = bbuf.get(size_t(nc_max * kb));
  for (int64_t jc = 0; jc < n; jc += kNc) {
    const int64_t nc = std::min(kNc, n - jc);
    for (int64_t pc = 0; pc < k; pc += kb) {
      const int64_t kc = std::min(kb, k - pc);
      const float beta_p = pc == 0 ? beta : 1.0f;  // later K blocks add to the first one's C
      PackB(trans_b, b, ldb, jc, nc, pc, kc, bp);
      for (int64_t ic = 0; ic < m; ic += kMc) {
        const int64_t mc = std::min(kMc, m - ic);
        PackA(trans_a, a, lda, ic, mc, pc, kc, ap);
        // One B panel stays in L1 while every A strip of the block (in L2) passes it.
        for (int64_t jr = 0; jr < nc; jr += kNR)
          for (int64_t ir = 0; ir < mc; ir += kMR)
            Tile(kc, ap + ir * kc, bp + jr * kc, c + (ic + ir) * ldc + jc + jr, ldc, alpha, beta_p,
                 std::min(kMR, mc - ir), std::min(kNR, nc - jr));
      }
    }
  }
}

void BlockedF32(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  Blocked(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void BlockedBF16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a,
                 int64_t lda, const uint16_t* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  Blocked(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace HWY_NAMESPACE
}  // namespace diffq::backend::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace diffq::backend::cpu {

HWY_EXPORT(BlockedF32);
HWY_EXPORT(BlockedBF16);

void sgemm_blocked(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                   int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) return sgemm_detail::scale_c(m, n, beta, c, ldc);
  HWY_DYNAMIC_DISPATCH(BlockedF32)(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void sgemm_blocked_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                        const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, float beta, float* c,
                        int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) return sgemm_detail::scale_c(m, n, beta, c, ldc);
  HWY_DYNAMIC_DISPATCH(BlockedBF16)(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace diffq::backend::cpu
#endif
