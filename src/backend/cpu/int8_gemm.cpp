// int8 x int8 -> int32 GEMM: packing (int8 -> int16 pairs), a 6 x 16 vpmaddwd register tile under
// Highway runtime dispatch, the (M, N) macro-tile thread split, and the scalar reference.
#include "backend/cpu/hwy_config.h"
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backend/cpu/int8_gemm.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "backend/cpu/int8_gemm.h"
#include "backend/cpu/threads.h"

#ifndef DIFFQ_INT8_GEMM_ONCE
#define DIFFQ_INT8_GEMM_ONCE
namespace diffq::backend::cpu::int8_gemm_detail {

constexpr int64_t kMR = 6;     // rows of the register tile
constexpr int64_t kNR = 16;    // columns of the register tile (one B panel)
constexpr int64_t kMc = 96;    // rows of a packed A block (16 register tiles)
constexpr int64_t kNc = 256;   // columns of a packed B block (16 panels)
constexpr int64_t kKc = 512;   // depth of a block (256 int16 pairs)

// A block [mc rows, kc] -> per 6-row strip, per k-pair p: 6 int32 words, each the int16 pair
// (a[r, 2p], a[r, 2p+1]); rows past m and the odd tail of k are zero.
inline void pack_a(const int8_t* a, int64_t lda, int64_t rows, int64_t kc, int16_t* dst) {
  const int64_t pairs = (kc + 1) / 2;
  for (int64_t s = 0; s < rows; s += kMR) {
    for (int64_t p = 0; p < pairs; ++p) {
      for (int64_t r = 0; r < kMR; ++r) {
        const int64_t row = s + r;
        int16_t lo = 0, hi = 0;
        if (row < rows) {
          const int8_t* ar = a + row * lda;
          lo = ar[2 * p];
          hi = (2 * p + 1 < kc) ? ar[2 * p + 1] : int16_t(0);
        }
        *dst++ = lo;
        *dst++ = hi;
      }
    }
  }
}

// B block [nc rows of B (= output columns), kc] -> per 16-column panel, per k-pair p: 16 int16 pairs
// (b[n, 2p], b[n, 2p+1]) for n in the panel; columns past nc and the odd tail of k are zero.
inline void pack_b(const int8_t* b, int64_t ldb, int64_t cols, int64_t kc, int16_t* dst) {
  const int64_t pairs = (kc + 1) / 2;
  for (int64_t j0 = 0; j0 < cols; j0 += kNR) {
    for (int64_t p = 0; p < pairs; ++p) {
      for (int64_t j = 0; j < kNR; ++j) {
        const int64_t col = j0 + j;
        int16_t lo = 0, hi = 0;
        if (col < cols) {
          const int8_t* br = b + col * ldb;
          lo = br[2 * p];
          hi = (2 * p + 1 < kc) ? br[2 * p + 1] : int16_t(0);
        }
        *dst++ = lo;
        *dst++ = hi;
      }
    }
  }
}

inline int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

}  // namespace diffq::backend::cpu::int8_gemm_detail
#endif

HWY_BEFORE_NAMESPACE();
namespace diffq::backend::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// acc(6 x 16 int32 tile at c, row stride ldc) (+)= packed A strip x packed B panel over `pairs`.
// accumulate=false overwrites. Full tiles only; the caller handles edges through a scratch tile.
void Int8Tile(const int16_t* ap, const int16_t* bp, int64_t pairs, int32_t* c, int64_t ldc, bool accumulate) {
#if HWY_TARGET == HWY_SCALAR
  // No int16 pairs in one-lane vectors: plain loops over the same packed layout.
  for (int r = 0; r < 6; ++r)
    for (int j = 0; j < 16; ++j) {
      int32_t s = 0;
      for (int64_t p = 0; p < pairs; ++p)
        s += int32_t(ap[12 * p + 2 * r]) * bp[32 * p + 2 * j] + int32_t(ap[12 * p + 2 * r + 1]) * bp[32 * p + 2 * j + 1];
      c[r * ldc + j] = (accumulate ? c[r * ldc + j] : 0) + s;
    }
#else
  const hn::CappedTag<int32_t, 8> d32;
  const hn::Repartition<int16_t, decltype(d32)> d16;
  using V32 = hn::Vec<decltype(d32)>;
  constexpr size_t kL = hn::MaxLanes(d32);
  if constexpr (kL == 8) {
    // AVX2 / AVX-512 (capped to 256 bits): 12 named accumulators so they stay in registers.
    const V32 zero = hn::Zero(d32);
    V32 c00 = zero, c01 = zero, c10 = zero, c11 = zero, c20 = zero, c21 = zero;
    V32 c30 = zero, c31 = zero, c40 = zero, c41 = zero, c50 = zero, c51 = zero;
    V32 u00 = zero, u01 = zero, u10 = zero, u11 = zero, u20 = zero, u21 = zero;  // sum1 (unused on x86)
    V32 u30 = zero, u31 = zero, u40 = zero, u41 = zero, u50 = zero, u51 = zero;
    const int32_t* a32 = reinterpret_cast<const int32_t*>(ap);
    for (int64_t p = 0; p < pairs; ++p, a32 += 6, bp += 32) {
      const auto b0 = hn::LoadU(d16, bp), b1 = hn::LoadU(d16, bp + 16);
#define DIFFQ_I8_ROW(r)                                                              \
  {                                                                                  \
    const auto av = hn::BitCast(d16, hn::Set(d32, a32[r]));                          \
    c##r##0 = hn::ReorderWidenMulAccumulate(d32, av, b0, c##r##0, u##r##0);          \
    c##r##1 = hn::ReorderWidenMulAccumulate(d32, av, b1, c##r##1, u##r##1);          \
  }
      DIFFQ_I8_ROW(0) DIFFQ_I8_ROW(1) DIFFQ_I8_ROW(2) DIFFQ_I8_ROW(3) DIFFQ_I8_ROW(4) DIFFQ_I8_ROW(5)
#undef DIFFQ_I8_ROW
    }
    const V32 out[12] = {hn::RearrangeToOddPlusEven(c00, u00), hn::RearrangeToOddPlusEven(c01, u01),
                         hn::RearrangeToOddPlusEven(c10, u10), hn::RearrangeToOddPlusEven(c11, u11),
                         hn::RearrangeToOddPlusEven(c20, u20), hn::RearrangeToOddPlusEven(c21, u21),
                         hn::RearrangeToOddPlusEven(c30, u30), hn::RearrangeToOddPlusEven(c31, u31),
                         hn::RearrangeToOddPlusEven(c40, u40), hn::RearrangeToOddPlusEven(c41, u41),
                         hn::RearrangeToOddPlusEven(c50, u50), hn::RearrangeToOddPlusEven(c51, u51)};
    for (int r = 0; r < 6; ++r)
      for (int v = 0; v < 2; ++v) {
        int32_t* dst = c + r * ldc + 8 * v;
        const V32 sum = accumulate ? hn::Add(out[2 * r + v], hn::LoadU(d32, dst)) : out[2 * r + v];
        hn::StoreU(sum, d32, dst);
      }
  } else {
    constexpr size_t kV = 16 / kL;  // vectors per 16-column panel row
    static_assert(kV * kL == 16, "lane count must divide 16");
    V32 s0[6][kV], s1[6][kV];
    for (int r = 0; r < 6; ++r)
      for (size_t v = 0; v < kV; ++v) s0[r][v] = s1[r][v] = hn::Zero(d32);
    for (int64_t p = 0; p < pairs; ++p) {
      decltype(hn::Zero(d16)) b[kV];
      for (size_t v = 0; v < kV; ++v) b[v] = hn::LoadU(d16, bp + 32 * p + 2 * kL * v);
      const int32_t* a32 = reinterpret_cast<const int32_t*>(ap + 12 * p);
      for (int r = 0; r < 6; ++r) {
        int32_t word;
        std::memcpy(&word, a32 + r, 4);
        const auto av = hn::BitCast(d16, hn::Set(d32, word));
        for (size_t v = 0; v < kV; ++v) s0[r][v] = hn::ReorderWidenMulAccumulate(d32, av, b[v], s0[r][v], s1[r][v]);
      }
    }
    for (int r = 0; r < 6; ++r) {
      for (size_t v = 0; v < kV; ++v) {
        V32 sum = hn::RearrangeToOddPlusEven(s0[r][v], s1[r][v]);
        int32_t* dst = c + r * ldc + kL * v;
        if (accumulate) sum = hn::Add(sum, hn::LoadU(d32, dst));
        hn::StoreU(sum, d32, dst);
      }
    }
  }
#endif
}

}  // namespace HWY_NAMESPACE
}  // namespace diffq::backend::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace diffq::backend::cpu {

HWY_EXPORT(Int8Tile);

using namespace int8_gemm_detail;

void gemm_s8s8s32_reference(int64_t m, int64_t n, int64_t k, const int8_t* a, int64_t lda,
                            const int8_t* b, int64_t ldb, int32_t* c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      int64_t s = 0;
      for (int64_t p = 0; p < k; ++p) s += int64_t(a[i * lda + p]) * int64_t(b[j * ldb + p]);
      c[i * ldc + j] = int32_t(s);
    }
}

void gemm_s8s8s32(int64_t m, int64_t n, int64_t k, const int8_t* a, int64_t lda, const int8_t* b,
                  int64_t ldb, int32_t* c, int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    for (int64_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n, 0);
    return;
  }
  const auto tile = HWY_DYNAMIC_DISPATCH(Int8Tile);
  const int64_t mt = (m + kMc - 1) / kMc, nt = (n + kNc - 1) / kNc;
  parallel_for(mt * nt, 1, [&](int64_t t0, int64_t t1) {
    thread_local std::vector<int16_t> apack, bpack;
    apack.resize(size_t(kMc * round_up(kKc, 2)));
    bpack.resize(size_t(kNc * round_up(kKc, 2)));
    int32_t scratch[kMR * kNR];
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t i0 = (t / nt) * kMc, j0 = (t % nt) * kNc;
      const int64_t mc = std::min(kMc, m - i0), nc = std::min(kNc, n - j0);
      for (int64_t k0 = 0; k0 < k; k0 += kKc) {
        const int64_t kc = std::min(kKc, k - k0), pairs = (kc + 1) / 2;
        pack_a(a + i0 * lda + k0, lda, mc, kc, apack.data());
        pack_b(b + j0 * ldb + k0, ldb, nc, kc, bpack.data());
        const bool acc = k0 > 0;
        for (int64_t jj = 0; jj < nc; jj += kNR) {
          const int16_t* bp = bpack.data() + (jj / kNR) * pairs * 2 * kNR;
          const int64_t nr = std::min(kNR, nc - jj);
          for (int64_t ii = 0; ii < mc; ii += kMR) {
            const int16_t* ap = apack.data() + (ii / kMR) * pairs * 2 * kMR;
            const int64_t mr = std::min(kMR, mc - ii);
            int32_t* cp = c + (i0 + ii) * ldc + j0 + jj;
            if (mr == kMR && nr == kNR) {
              tile(ap, bp, pairs, cp, ldc, acc);
            } else {
              tile(ap, bp, pairs, scratch, kNR, false);
              for (int64_t r = 0; r < mr; ++r)
                for (int64_t j = 0; j < nr; ++j) cp[r * ldc + j] = (acc ? cp[r * ldc + j] : 0) + scratch[r * kNR + j];
            }
          }
        }
      }
    }
  });
}

}  // namespace diffq::backend::cpu
#endif
