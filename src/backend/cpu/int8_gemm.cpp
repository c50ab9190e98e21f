// int8 x int8 -> int32 GEMM: A and B packing (int8 -> int16 pairs), a 6 x 16 vpmaddwd register tile
// and the fused epilogue under Highway runtime dispatch, the thread split and blocking, the scalar
// references. Contraction into fused multiply-adds is off for this file: the epilogue must form
// round(c * sx) * sw + bias with exactly the reference's separate roundings.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "backend/cpu/hwy_config.h"
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backend/cpu/int8_gemm.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "backend/cpu/simd-inl.h"
#include "backend/cpu/activation-inl.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backend/cpu/aligned_buffer.h"
#include "backend/cpu/int8_gemm.h"
#include "backend/cpu/int8_gemm_amx.h"
#include "backend/cpu/onednn_gemm.h"
#include "backend/cpu/row_kernels.h"
#include "backend/cpu/simd_targets.h"
#include "backend/cpu/threads.h"
#include "backend/cpu/tuning.h"
#include "diffq/error.h"

#ifndef DIFFQ_INT8_GEMM_ONCE
#define DIFFQ_INT8_GEMM_ONCE
namespace diffq::backend::cpu::int8_gemm_detail {

constexpr int64_t kMR = kInt8StripRows;  // rows of the register tile (one packed A strip)
constexpr int64_t kNR = 16;              // columns of the register tile (one B panel)
constexpr int64_t kTile = kMR * kNR;     // int32 words of a tile buffer (row stride kNR)
constexpr int64_t kNcPanels = 16;        // B panels per N block (256 columns: 256 KiB at full depth, L2)
constexpr int64_t kKc = 512;             // most depth of a block: A slice 6 KiB + B panel 16 KiB in L1

// K split into equal blocks of at most kKc, each even (blocks start on a k-pair): 768 -> 2 x 384 rather
// than 512 + a short 256 whose tile calls would be half overhead.
inline int64_t k_block(int64_t k) {
  const int64_t blocks = (k + kKc - 1) / kKc;
  return ((k + blocks - 1) / blocks + 1) / 2 * 2;
}

// B block [cols rows of B (= output columns), kc] -> per 16-column panel, per k-pair p: 16 int16 pairs
// (b[n, 2p], b[n, 2p+1]); columns past `cols` and the odd tail of k are zero. Pairs [p0, pairs) only.
inline void pack_b_scalar(const int8_t* b, int64_t ldb, int64_t cols, int64_t kc, int64_t p0, int16_t* dst) {
  const int64_t pairs = (kc + 1) / 2;
  for (int64_t j0 = 0; j0 < cols; j0 += kNR) {
    int16_t* panel = dst + (j0 / kNR) * pairs * 2 * kNR;
    for (int64_t p = p0; p < pairs; ++p)
      for (int64_t j = 0; j < kNR; ++j) {
        const int64_t col = j0 + j;
        int16_t lo = 0, hi = 0;
        if (col < cols) {
          const int8_t* br = b + col * ldb;
          lo = br[2 * p];
          hi = (2 * p + 1 < kc) ? br[2 * p + 1] : int16_t(0);
        }
        panel[p * 2 * kNR + 2 * j] = lo;
        panel[p * 2 * kNR + 2 * j + 1] = hi;
      }
  }
}

// The epilogue's steps after the first rounding of one element of column j (f = round(out, acc x sx)):
// times the column's scale, plus its bias (the caller rounds to the output).
inline float finish_value(float f, const Int8Epilogue& ep, int64_t j) {
  float v = f * ep.col_scale[j];
  if (ep.bias) v += ep.bias[j];
  return v;
}

// Int8ScaledRowsEpilogue's columns past its vectors: t (bf16, row stride ldt) holds round(bf16, acc x sx)
// of ep's output rows [i0, i0 + mr) x columns [j0, j0 + nr); finished into ep's bf16 output.
inline void epilogue_finish_bf16_scalar(int64_t i0, int64_t mr, int64_t j0, int64_t nr, const uint16_t* t,
                                        int64_t ldt, const Int8Epilogue& ep) {
  for (int64_t r = 0; r < mr; ++r)
    for (int64_t j = 0; j < nr; ++j)
      static_cast<uint16_t*>(ep.y)[size_t((i0 + r - ep.y_row0) * ep.ldy + j0 + j - ep.y_col0)] =
          f32_to_bf16(finish_value(bf16_to_f32(t[r * ldt + j]), ep, j0 + j));
}

// The epilogue of rows [i0, i0 + mr) x columns [j0, j0 + nr) from an int32 tile (row stride ldt),
// element by element (the reference, and the vector path's edges).
inline void epilogue_scalar(int64_t i0, int64_t mr, int64_t j0, int64_t nr, const int32_t* t, int64_t ldt,
                            const Int8Epilogue& ep) {
  for (int64_t r = 0; r < mr; ++r) {
    const int64_t i = i0 + r;
    const float sx = ep.row_scale[ep.per_tensor ? 0 : i];
    for (int64_t j = 0; j < nr; ++j) {
      const float v = finish_value(round_through(ep.out, float(t[r * ldt + j]) * sx), ep, j0 + j);
      const size_t at = size_t((i - ep.y_row0) * ep.ldy + j0 + j - ep.y_col0);
      if (ep.store_f32) {
        static_cast<float*>(ep.y)[at] = round_through(ep.out, v);
        continue;
      }
      switch (ep.out) {
        case DType::bf16: static_cast<uint16_t*>(ep.y)[at] = f32_to_bf16(v); break;
        case DType::f16: static_cast<uint16_t*>(ep.y)[at] = f32_to_f16(v); break;
        default: static_cast<float*>(ep.y)[at] = v; break;
      }
    }
  }
}

// linear_q_act's activation on rows [r0, r0 + rows) x columns [c0, c0 + cols) of ep's output, just written
// (the unary op's values, row_kernels.h).
inline void apply_activation(const Int8Epilogue* ep, int64_t r0, int64_t rows, int64_t c0, int64_t cols) {
  if (!ep || !ep->act || rows <= 0 || cols <= 0) return;
  const size_t at = size_t((r0 - ep->y_row0) * ep->ldy + c0 - ep->y_col0) * dtype_size(ep->out);
  unary_rows_in_place(*ep->act, ep->out, static_cast<uint8_t*>(ep->y) + at, ep->ldy, rows, cols);
}

}  // namespace diffq::backend::cpu::int8_gemm_detail
#endif

HWY_BEFORE_NAMESPACE();
namespace diffq::backend::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using namespace int8_gemm_detail;

// out (6 x 16 int32, row stride 16) = [cin +] packed A strip x packed B panel over `pairs` k-pairs.
// cin may be null (no partial sums yet) or equal to out.
void Int8Tile(const int16_t* ap, const int16_t* bp, int64_t pairs, const int32_t* cin, int32_t* out) {
#if HWY_TARGET == HWY_SCALAR
  // No int16 pairs in one-lane vectors: plain loops over the same packed layout.
  for (int r = 0; r < 6; ++r)
    for (int j = 0; j < 16; ++j) {
      int32_t s = cin ? cin[r * 16 + j] : 0;
      for (int64_t p = 0; p < pairs; ++p)
        s += int32_t(ap[12 * p + 2 * r]) * bp[32 * p + 2 * j] + int32_t(ap[12 * p + 2 * r + 1]) * bp[32 * p + 2 * j + 1];
      out[r * 16 + j] = s;
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
    const V32 res[12] = {hn::RearrangeToOddPlusEven(c00, u00), hn::RearrangeToOddPlusEven(c01, u01),
                         hn::RearrangeToOddPlusEven(c10, u10), hn::RearrangeToOddPlusEven(c11, u11),
                         hn::RearrangeToOddPlusEven(c20, u20), hn::RearrangeToOddPlusEven(c21, u21),
                         hn::RearrangeToOddPlusEven(c30, u30), hn::RearrangeToOddPlusEven(c31, u31),
                         hn::RearrangeToOddPlusEven(c40, u40), hn::RearrangeToOddPlusEven(c41, u41),
                         hn::RearrangeToOddPlusEven(c50, u50), hn::RearrangeToOddPlusEven(c51, u51)};
    for (int i = 0; i < 12; ++i) {
      const V32 sum = cin ? hn::Add(res[i], hn::LoadU(d32, cin + 8 * i)) : res[i];
      hn::StoreU(sum, d32, out + 8 * i);
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
        if (cin) sum = hn::Add(sum, hn::LoadU(d32, cin + r * 16 + kL * v));
        hn::StoreU(sum, d32, out + r * 16 + kL * v);
      }
    }
  }
#endif
}

#if HWY_TARGET != HWY_SCALAR
// In-register transpose of an 8 x 8 int32 matrix (8-lane vectors with 128-bit blocks).
template <class D, class V>
HWY_INLINE void Transpose8x8(D d, V (&r)[8]) {
  const hn::Repartition<int64_t, D> d64;
  auto lo64 = [&](V a, V b) { return hn::BitCast(d, hn::InterleaveLower(d64, hn::BitCast(d64, a), hn::BitCast(d64, b))); };
  auto hi64 = [&](V a, V b) { return hn::BitCast(d, hn::InterleaveUpper(d64, hn::BitCast(d64, a), hn::BitCast(d64, b))); };
  const V t0 = hn::InterleaveLower(d, r[0], r[1]), t1 = hn::InterleaveUpper(d, r[0], r[1]);
  const V t2 = hn::InterleaveLower(d, r[2], r[3]), t3 = hn::InterleaveUpper(d, r[2], r[3]);
  const V t4 = hn::InterleaveLower(d, r[4], r[5]), t5 = hn::InterleaveUpper(d, r[4], r[5]);
  const V t6 = hn::InterleaveLower(d, r[6], r[7]), t7 = hn::InterleaveUpper(d, r[6], r[7]);
  const V u0 = lo64(t0, t2), u1 = hi64(t0, t2), u2 = lo64(t1, t3), u3 = hi64(t1, t3);
  const V u4 = lo64(t4, t6), u5 = hi64(t4, t6), u6 = lo64(t5, t7), u7 = hi64(t5, t7);
  r[0] = hn::ConcatLowerLower(d, u4, u0);
  r[1] = hn::ConcatLowerLower(d, u5, u1);
  r[2] = hn::ConcatLowerLower(d, u6, u2);
  r[3] = hn::ConcatLowerLower(d, u7, u3);
  r[4] = hn::ConcatUpperUpper(d, u4, u0);
  r[5] = hn::ConcatUpperUpper(d, u5, u1);
  r[6] = hn::ConcatUpperUpper(d, u6, u2);
  r[7] = hn::ConcatUpperUpper(d, u7, u3);
}
#endif

// pack_b_scalar's layout, the full 16-deep chunks by vectors: per panel, 16 B rows of 16 int8 widened to
// int16 (8 pairs each) and transposed as two 8 x 8 int32 blocks (rows 0-7 and 8-15 of each pair).
void Int8PackB(const int8_t* b, int64_t ldb, int64_t cols, int64_t kc, int16_t* dst) {
  int64_t done_pairs = 0;
#if HWY_TARGET != HWY_SCALAR
  const hn::CappedTag<int32_t, 8> d32;
  if constexpr (hn::MaxLanes(d32) == 8) {
    const hn::Repartition<int16_t, decltype(d32)> d16;
    const hn::Rebind<int8_t, decltype(d16)> d8;
    using V = hn::Vec<decltype(d32)>;
    static const int8_t kZeros[16] = {};
    const int64_t pairs = (kc + 1) / 2, chunks = kc / 16;
    for (int64_t j0 = 0; j0 < cols; j0 += kNR) {
      const int8_t* rows[16];
      for (int64_t j = 0; j < kNR; ++j) rows[j] = j0 + j < cols ? b + (j0 + j) * ldb : nullptr;
      int16_t* panel = dst + (j0 / kNR) * pairs * 2 * kNR;
      for (int64_t ch = 0; ch < chunks; ++ch) {
        V lo[8], hi[8];
        for (int j = 0; j < 8; ++j) {
          const int8_t* r0 = rows[j] ? rows[j] + 16 * ch : kZeros;
          const int8_t* r1 = rows[j + 8] ? rows[j + 8] + 16 * ch : kZeros;
          lo[j] = hn::BitCast(d32, hn::PromoteTo(d16, hn::LoadU(d8, r0)));
          hi[j] = hn::BitCast(d32, hn::PromoteTo(d16, hn::LoadU(d8, r1)));
        }
        Transpose8x8(d32, lo);
        Transpose8x8(d32, hi);
        int16_t* out = panel + ch * 8 * 2 * kNR;
        for (int q = 0; q < 8; ++q) {
          hn::StoreU(hn::BitCast(d16, lo[q]), d16, out + q * 2 * kNR);
          hn::StoreU(hn::BitCast(d16, hi[q]), d16, out + q * 2 * kNR + 16);
        }
      }
    }
    done_pairs = chunks * 8;
  }
#endif
  pack_b_scalar(b, ldb, cols, kc, done_pairs, dst);
}

// The epilogue's steps after the first rounding, on one vector f = round(out, float(acc) x sx) of output
// columns j, j + 1, ...: times the column scales, plus the bias, rounded to bf16 for bf16 outputs, stored at
// element `at` of ep's output (bf16, or f32: rounded through bf16 where the output is bf16 but stored as f32).
// linear_q_act's activation of the output value in registers, lane by lane what the unary op computes on the
// stored value: gelu, GELU (tanh) of f32 outputs by activation-inl.h's GeluTanh; table, any function of bf16
// outputs by the unary op's table of bf16 values (row_kernels.h bf16_unary_table), gathered.
template <class D>
HWY_INLINE void FinishVector(D df, hn::Vec<D> f, const Int8Epilogue& ep, int64_t j, size_t at, bool gelu,
                             const uint16_t* table) {
  const bool bf = ep.out == DType::bf16;
  f = hn::Mul(f, hn::LoadU(df, ep.col_scale + j));
  if (ep.bias) f = hn::Add(f, hn::LoadU(df, ep.bias + j));
  if (bf) f = RoundToBf16(df, f);
  if (gelu) f = GeluTanh(df, f);  // f32 outputs only (Int8RowsEpilogue)
  if (table) f = Bf16TableLookup(df, f, table);
  if (bf && !ep.store_f32)
    StoreRoundedBf16(df, f, static_cast<uint16_t*>(ep.y) + at);
  else
    hn::StoreU(f, df, static_cast<float*>(ep.y) + at);
}

// One vector of the epilogue: the int32 products at t (output columns j, j + 1, ...) times the row's scale
// sx, rounded to bf16 for bf16 outputs, then FinishVector.
template <class D>
HWY_INLINE void EpilogueVector(D df, const int32_t* t, hn::Vec<D> sx, const Int8Epilogue& ep, int64_t j, size_t at,
                               bool gelu = false, const uint16_t* table = nullptr) {
  const hn::RebindToSigned<D> di;
  auto f = hn::Mul(hn::ConvertTo(df, hn::LoadU(di, t)), sx);
  if (ep.out == DType::bf16) f = RoundToBf16(df, f);
  FinishVector(df, f, ep, j, at, gelu, table);
}

// The epilogue of one finished tile (row stride ldt) at rows [i0, i0 + mr), columns [j0, j0 + nr <= kNR):
// int32 copy to c without ep, else ep's scale / bias / cast (f32 and bf16 by vectors on full tiles).
void Int8TileEpilogue(const int32_t* tile, int64_t ldt, int64_t i0, int64_t mr, int64_t j0, int64_t nr,
                      const Int8Epilogue* ep, int32_t* c, int64_t ldc) {
  if (!ep) {
    for (int64_t r = 0; r < mr; ++r) std::memcpy(c + (i0 + r) * ldc + j0, tile + r * ldt, size_t(nr) * 4);
    return;
  }
#if HWY_TARGET != HWY_SCALAR
  const hn::CappedTag<float, 8> df;
  constexpr int64_t kL = int64_t(hn::MaxLanes(df));
  if (nr == kNR && (ep->out == DType::f32 || ep->out == DType::bf16)) {
    for (int64_t r = 0; r < mr; ++r) {
      const int64_t i = i0 + r;
      const auto sx = hn::Set(df, ep->row_scale[ep->per_tensor ? 0 : i]);
      for (int64_t v0 = 0; v0 < kNR; v0 += kL)
        EpilogueVector(df, tile + r * ldt + v0, sx, *ep, j0 + v0,
                       size_t((i - ep->y_row0) * ep->ldy + j0 + v0 - ep->y_col0));
    }
    return;
  }
#endif
  epilogue_scalar(i0, mr, j0, nr, tile, ldt, *ep);
}

// The epilogue of a finished block of any width (row stride ldt) at rows [i0, i0 + rows), columns
// [j0, j0 + cols): what Int8TileEpilogue does per tile, row by row across the block at the CPU's full
// vector width (oneDNN's int32 slices: one call per slice, not one per 6 x 16 tile); the same float
// operations per element, so the same bits. Columns past the last full vector, and f16, go element
// by element.
void Int8RowsEpilogue(const int32_t* t, int64_t ldt, int64_t i0, int64_t rows, int64_t j0, int64_t cols,
                      const Int8Epilogue* ep, int32_t* c, int64_t ldc) {
  if (!ep) {
    for (int64_t r = 0; r < rows; ++r) std::memcpy(c + (i0 + r) * ldc + j0, t + r * ldt, size_t(cols) * 4);
    return;
  }
  int64_t done = 0;
  // linear_q_act's activation in registers on the full vectors (the same values as the unary op afterwards):
  // GELU of f32 outputs, any function of bf16 outputs by table (a gather costs a fraction of GELU's exp and
  // division: docs/benchmarks.md "Eighth AMX session").
  const bool gelu = ep->act == ops::UnaryFn::gelu_tanh && !ep->store_f32 && ep->out == DType::f32;
  const uint16_t* table = ep->act && !ep->store_f32 && ep->out == DType::bf16 ? bf16_unary_table(*ep->act) : nullptr;
#if HWY_TARGET != HWY_SCALAR
  const hn::ScalableTag<float> df;
  const int64_t L = int64_t(hn::Lanes(df));
  if (ep->out == DType::f32 || ep->out == DType::bf16) {
    done = cols / L * L;
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t i = i0 + r;
      const auto sx = hn::Set(df, ep->row_scale[ep->per_tensor ? 0 : i]);
      const size_t at0 = size_t((i - ep->y_row0) * ep->ldy + j0 - ep->y_col0);
      for (int64_t v0 = 0; v0 < done; v0 += L)
        EpilogueVector(df, t + r * ldt + v0, sx, *ep, j0 + v0, at0 + size_t(v0), gelu, table);
    }
  }
#else
  (void)gelu, (void)table;
#endif
  if (done < cols) epilogue_scalar(i0, rows, j0 + done, cols - done, t + done, ldt, *ep);
  // The activation of what the vectors did not take: the columns past them, or all for f32 outputs' other
  // functions and for f16.
  const int64_t from = gelu || table ? done : 0;
  apply_activation(ep, i0, rows, j0 + from, cols - from);
}

// The epilogue of a block whose first step oneDNN did (onednn_gemm_s8s8_row_scaled_bf16_part): t (bf16,
// row stride ldt) holds round(bf16, float(acc) x sx) of ep's output rows [i0, i0 + rows) x columns
// [j0, j0 + cols); the rest as Int8RowsEpilogue after its first rounding (FinishVector; the columns past
// the last full vector element by element) into ep's bf16 output, and linear_q_act's activation.
void Int8ScaledRowsEpilogue(const uint16_t* t, int64_t ldt, int64_t i0, int64_t rows, int64_t j0, int64_t cols,
                            const Int8Epilogue* ep) {
  const uint16_t* table = ep->act ? bf16_unary_table(*ep->act) : nullptr;
  int64_t done = 0;
#if HWY_TARGET != HWY_SCALAR
  const hn::ScalableTag<float> df;
  const int64_t L = int64_t(hn::Lanes(df));
  done = cols / L * L;
  for (int64_t r = 0; r < rows; ++r) {
    const size_t at0 = size_t((i0 + r - ep->y_row0) * ep->ldy + j0 - ep->y_col0);
    for (int64_t v0 = 0; v0 < done; v0 += L)
      FinishVector(df, LoadBf16(df, t + r * ldt + v0), *ep, j0 + v0, at0 + size_t(v0), false, table);
  }
#endif
  if (done < cols) epilogue_finish_bf16_scalar(i0, rows, j0 + done, cols - done, t + done, ldt, *ep);
  if (table) apply_activation(ep, i0, rows, j0 + done, cols - done);
}

}  // namespace HWY_NAMESPACE
}  // namespace diffq::backend::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace diffq::backend::cpu {

HWY_EXPORT(Int8Tile);
HWY_EXPORT(Int8ScaledRowsEpilogue);
HWY_EXPORT(Int8PackB);
HWY_EXPORT(Int8TileEpilogue);
HWY_EXPORT(Int8RowsEpilogue);

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

void int8_epilogue_reference(int64_t m, int64_t n, const int32_t* c, int64_t ldc, const Int8Epilogue& ep) {
  epilogue_scalar(0, m, 0, n, c, ldc, ep);
}

void pack_a_row_s16(const int16_t* row, int64_t k, int16_t* strip, int64_t r) {
  const int64_t full = k / 2;
  for (int64_t p = 0; p < full; ++p) std::memcpy(strip + p * 2 * kMR + 2 * r, row + 2 * p, 4);
  if (k % 2) {
    const int16_t last[2] = {row[k - 1], 0};
    std::memcpy(strip + full * 2 * kMR + 2 * r, last, 4);
  }
}

void pack_a_s8(int64_t m, int64_t k, const int8_t* a, int64_t lda, int16_t* dst) {
  const int64_t strips = (m + kMR - 1) / kMR, se = int8_packed_strip_elems(k);
  parallel_for(strips, 16, [&](int64_t s0, int64_t s1) {
    thread_local std::vector<int16_t> row;
    row.assign(size_t(k), 0);
    for (int64_t s = s0; s < s1; ++s)
      for (int64_t r = 0; r < kMR; ++r) {
        const int64_t i = s * kMR + r;
        if (i < m)
          for (int64_t p = 0; p < k; ++p) row[size_t(p)] = a[i * lda + p];
        else
          std::fill(row.begin(), row.end(), int16_t(0));
        pack_a_row_s16(row.data(), k, dst + s * se, r);
      }
  });
}

namespace {

// The threads' shares of a GEMM in units of mu rows x nu columns (the tile's A strips x B panels, or the AMX
// tiles' 32 x 32 blocks): f(s0, s1, q0, q1) per share of row units x column units, on the pool. Threads split
// the columns (each widens / copies only its own part of B); rows too when columns run short.
template <class F>
void for_each_share(int64_t m, int64_t n, int64_t k, int64_t mu, int64_t nu, const F& f) {
  // run_part holds dispatched function pointers across thousands of tile calls. Taken before Highway has
  // chosen a target they would be its first-call trampoline, which re-detects the CPU (CPUID, a VM exit
  // under virtualisation) on every call: choose the target first.
  hwy::ChosenTarget& chosen = hwy::GetChosenTarget();
  if (!chosen.IsInitialized()) chosen.Update(hwy::SupportedTargets());
  const int64_t strips = (m + mu - 1) / mu, panels = (n + nu - 1) / nu;
  int64_t threads = in_parallel_region() ? 1 : num_threads();
  if (double(m) * double(n) * double(k) < 1 << 18) threads = 1;
  const int64_t tn = std::min(threads, panels), tm = std::min(std::max<int64_t>(1, threads / tn), strips);
  parallel_for(tn * tm, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t im = t / tn, in = t % tn;
      f(strips * im / tm, strips * (im + 1) / tm, panels * in / tn, panels * (in + 1) / tn);
    }
  });
}

// The tile's shares: A strips x B panels.
template <class F>
void for_each_int8_part(int64_t m, int64_t n, int64_t k, const F& f) {
  for_each_share(m, n, k, kMR, kNR, f);
}

// Rows of A per oneDNN call on unpacked strips (a multiple of the strip height): oneDNN copies its B slice
// into its own blocked layout at every call, so calls cover many rows; the int32 result of a call (rows x
// the share's columns) stays around L2 size.
constexpr int64_t kOnednnRows = 43 * kMR;
// On int8 rows, calls go by slices of the share's columns, each over up to kOnednnSliceRows rows: each
// B slice is copied into oneDNN's layout once per kOnednnSliceRows rows (not once per 258), and the int32
// block (rows x 256 columns) stays about L2 size. On an AMX Xeon the row chunks above ran the int8 GEMM
// at a third of oneDNN's own rate on the whole matmul (docs/benchmarks.md "int8 GEMM calls on AMX").
constexpr int64_t kOnednnSliceCols = 256;
constexpr int64_t kOnednnSliceRows = 512;

// Rows below which the AMX tiles leave a product to oneDNN / the tile: W is copied into the tiles' layout per
// call, which few row blocks do not amortise (oneDNN's copy of its slices is per call too). Measured on an AMX
// Xeon (docs/benchmarks.md "Tenth AMX session"): 128 rows ~10% slower than oneDNN, 256 level or faster, 512 and
// more faster.
constexpr int64_t kAmxMinRows = 256;

// A as a GEMM call holds it: the tile's packed strips, or row-major int8 rows (what oneDNN reads; the
// activation quantizer writes this form where oneDNN runs the product, so no unpacking is needed).
struct Int8A {
  const int16_t* strips = nullptr;
  const int8_t* rows = nullptr;
  int64_t lda = 0;
  bool amx_padded = false;  // rows in the AMX tiles' form (int8_gemm_amx.h), padding included
};

// One thread's share on oneDNN's VNNI / AMX-INT8 kernel: the share's A rows (read in place, or unpacked
// from the strips to int8), C's int32 block by oneDNN, then the same epilogue as the tile path. False
// where oneDNN has no native kernel for a call's shape: the caller then computes the whole share on the
// tile (the epilogue stores, so what earlier calls wrote is simply written again).
bool run_part_onednn(int64_t m, int64_t n, int64_t k, const Int8A& a, const int8_t* b, int64_t ldb, int32_t* c,
                     int64_t ldc, const Int8Epilogue* ep, int64_t s0, int64_t s1, int64_t q0, int64_t q1) {
  const auto rows_epilogue = HWY_DYNAMIC_DISPATCH(Int8RowsEpilogue);
  const auto scaled_epilogue = HWY_DYNAMIC_DISPATCH(Int8ScaledRowsEpilogue);
  thread_local std::vector<int8_t> abuf;
  thread_local AlignedBuffer<int32_t> cbufs;  // aligned: oneDNN's AMX tiles store unaligned C rows slowly
  thread_local AlignedBuffer<uint16_t> bbufs;  // the bf16 blocks (oneDNN's row-scaled store takes dense rows)
  // rows x cols of the product of int8 rows (stride lda) and B's columns from c0, at output rows from r0, and
  // the epilogue: bf16 outputs with the first rounding in oneDNN's store (a bf16 block: half the bytes of int32
  // C, and a shorter epilogue), else the int32 block and the whole epilogue.
  const auto product = [&](const int8_t* arows, int64_t lda, int64_t r0, int64_t rows, int64_t c0, int64_t cols) {
    // oneDNN's bf16 store (vcvtneps2bf16) takes denormal products as zero where the epilogue's rounding keeps
    // them: only blocks whose products cannot be denormal (|acc| >= 1: no row scale a nonzero denormal).
    const float* s = ep ? ep->row_scale + (ep->per_tensor ? 0 : r0) : nullptr;
    const auto denormal = [](float v) { return v != 0.f && std::fabs(v) < std::numeric_limits<float>::min(); };
    if (ep && ep->out == DType::bf16 && !ep->store_f32 && std::none_of(s, s + (ep->per_tensor ? 1 : rows), denormal)) {
      uint16_t* const block = bbufs.get(size_t(rows * cols));
      if (onednn_gemm_s8s8_row_scaled_bf16_part(rows, cols, k, arows, lda, b + c0 * ldb, ldb, s, ep->per_tensor,
                                                block)) {
        scaled_epilogue(block, cols, r0, rows, c0, cols, ep);
        return true;
      }
    }
    int32_t* const cbuf = cbufs.get(size_t(rows * cols));
    if (!onednn_gemm_s8s8s32_part(rows, cols, k, arows, lda, b + c0 * ldb, ldb, cbuf, cols)) return false;
    rows_epilogue(cbuf, cols, r0, rows, c0, cols, ep, c, ldc);  // (and linear_q_act's activation)
    return true;
  };
  const int16_t* const ap = a.strips;
  const int64_t se = int8_packed_strip_elems(k), c0 = q0 * kNR, c1 = std::min(n, q1 * kNR), cols = c1 - c0;
  if (a.rows) {
    const int64_t r_begin = s0 * kMR, r_end = std::min(m, s1 * kMR);
    for (int64_t j0 = c0; j0 < c1; j0 += kOnednnSliceCols) {
      const int64_t j1 = std::min(c1, j0 + kOnednnSliceCols), w = j1 - j0;
      for (int64_t r0 = r_begin; r0 < r_end; r0 += kOnednnSliceRows) {
        const int64_t rows = std::min(kOnednnSliceRows, r_end - r0);
        // The epilogue row by row across the slice: each output row's part is written whole while in L1
        // (panel by panel over all the rows, every row's line was fetched again for each panel).
        if (!product(a.rows + r0 * a.lda, a.lda, r0, rows, j0, w)) return false;
      }
    }
    return true;
  }
  const int64_t step = kOnednnRows / kMR;
  for (int64_t sb = s0; sb < s1; sb += step) {
    const int64_t se_end = std::min(s1, sb + step);
    const int64_t r0 = sb * kMR, r1 = std::min(m, se_end * kMR), rows = r1 - r0;
    if (rows <= 0) break;
    abuf.resize(size_t(rows * k));
    // Strip s, pair p: words 2r, 2r + 1 = a[6s + r, 2p], a[6s + r, 2p + 1]. Each strip read front to back
    // once, its rows written side by side (a row at a time, the strip would be read six times with a
    // stride).
    for (int64_t s = r0 / kMR; s * kMR < r1; ++s) {
      const int16_t* strip = ap + s * se;
      const int64_t rs = std::min(kMR, r1 - s * kMR);
      int8_t* dst[kMR];
      for (int64_t r = 0; r < rs; ++r) dst[r] = abuf.data() + (s * kMR + r - r0) * k;
      const int64_t pairs = k / 2;
      for (int64_t p = 0; p < pairs; ++p, strip += 2 * kMR)
        for (int64_t r = 0; r < rs; ++r) {
          dst[r][2 * p] = int8_t(strip[2 * r]);
          dst[r][2 * p + 1] = int8_t(strip[2 * r + 1]);
        }
      if (k % 2)
        for (int64_t r = 0; r < rs; ++r) dst[r][k - 1] = int8_t(strip[2 * r]);
    }
    if (!product(abuf.data(), k, r0, rows, c0, cols)) return false;
  }
  return true;
}

}  // namespace

bool int8_uses_onednn() {
  switch (current_tuning().gemm_kernel) {
    case GemmKernel::onednn: return true;
    case GemmKernel::diffq: case GemmKernel::diffq_widen: case GemmKernel::openblas: return false;
    case GemmKernel::best: break;
  }
  // Measured on an Emerald Rapids Xeon (AVX512-VNNI): the int8dq linear 327 GOP/s a thread on oneDNN
  // against 116 on the vpmaddwd tile (docs/benchmarks.md "Session 7"); exact either way.
  return onednn_int8_available();
}

bool int8_uses_amx() {
  if (current_tuning().gemm_kernel != GemmKernel::best) return false;
  static const bool yes =
      amx_int8_usable() && onednn_int8_available() && onednn_int8_impl().find("amx") != std::string::npos;
  // (asked each time: a SIMD target forced below AVX-512 keeps the lower kernels, as the attention's tiles)
  return yes && simd_dispatch_is_avx512();
}

bool int8_rows_use_amx(int64_t m, int64_t n, int64_t k) {
  return m >= kAmxMinRows && n >= 32 && k >= 1 && int8_uses_amx();
}

std::string int8_gemm_kernel_name() {
  if (int8_uses_amx())
    return "diffq AMX-INT8 tiles (32 x 32 blocks, the epilogue per block in L1) from " +
           std::to_string(kAmxMinRows) + " rows, else oneDNN matmul " + onednn_int8_impl() + " (s8 x s8 -> s32)";
  if (int8_uses_onednn()) return "oneDNN matmul " + onednn_int8_impl() + " (s8 x s8 -> s32)";
  return "diffq int8: int16-pair madd tile (" + simd_target_chosen() + ")";
}

namespace {

// One thread's share: A strips [s0, s1) x B panels [q0, q1), all of K.
void run_part(int64_t m, int64_t n, int64_t k, const Int8A& a, const int8_t* b, int64_t ldb, int32_t* c,
              int64_t ldc, const Int8Epilogue* ep, int64_t s0, int64_t s1, int64_t q0, int64_t q1) {
  if (int8_uses_onednn() && run_part_onednn(m, n, k, a, b, ldb, c, ldc, ep, s0, s1, q0, q1)) return;
  const auto tile = HWY_DYNAMIC_DISPATCH(Int8Tile);
  const auto pack_b = HWY_DYNAMIC_DISPATCH(Int8PackB);
  const auto epilogue = HWY_DYNAMIC_DISPATCH(Int8TileEpilogue);
  thread_local std::vector<int16_t> bbuf;
  thread_local std::vector<int32_t> cbuf;
  const int64_t se = int8_packed_strip_elems(k), strips = s1 - s0;
  // The tile reads strips: int8 rows are packed here, this share's strips only (strip s at (s - sbase)).
  thread_local std::vector<int16_t> own;
  const int16_t* ap = a.strips;
  int64_t sbase = 0;
  if (!ap) {
    const int64_t r0 = s0 * kMR, r1 = std::min(m, s1 * kMR);
    own.resize(size_t(strips * se));
    pack_a_s8(r1 - r0, k, a.rows + r0 * a.lda, a.lda, own.data());
    ap = own.data();
    sbase = s0;
  }
  const int64_t kb = k_block(k);
  bbuf.resize(size_t(kNcPanels * kNR * kb));
  if (k > kb) cbuf.resize(std::max(cbuf.size(), size_t(strips * kNcPanels * kTile)));
  alignas(64) int32_t scratch[kTile];
  for (int64_t qb = q0; qb < q1; qb += kNcPanels) {
    const int64_t np = std::min(kNcPanels, q1 - qb), j0 = qb * kNR, nc = std::min(np * kNR, n - j0);
    for (int64_t k0 = 0; k0 < k; k0 += kb) {
      const int64_t kc = std::min(kb, k - k0), pairs = (kc + 1) / 2;
      const bool first = k0 == 0, last = k0 + kc >= k;
      pack_b(b + j0 * ldb + k0, ldb, nc, kc, bbuf.data());
      // The A strip slice stays in L1 across the block's panels; the panels stream from L2.
      for (int64_t s = s0; s < s1; ++s) {
        const int16_t* as = ap + (s - sbase) * se + k0 * kMR;  // k0 / 2 pairs of 2 * kMR int16
        for (int64_t q = 0; q < np; ++q) {
          const int16_t* bp = bbuf.data() + q * pairs * 2 * kNR;
          const int64_t jq = j0 + q * kNR, nr = std::min(kNR, n - jq);
          int32_t* part = k > kb ? cbuf.data() + ((s - s0) * np + q) * kTile : nullptr;
          const int32_t* cin = first ? nullptr : part;
          if (!last) {
            tile(as, bp, pairs, cin, part);
          } else {
            tile(as, bp, pairs, cin, scratch);
            epilogue(scratch, kNR, s * kMR, std::min(kMR, m - s * kMR), jq, nr, ep, c, ldc);
          }
        }
      }
    }
    // The column block's finished rows, while they are in cache.
    apply_activation(ep, s0 * kMR, std::min(m, s1 * kMR) - s0 * kMR, j0, nc);
  }
}

}  // namespace

namespace {

// The threads' shares of a product on the AMX tiles: f(r0, r1, c0, c1) per share of 32 x 32 blocks.
template <class F>
void for_each_amx_part(int64_t m, int64_t n, int64_t k, const F& f) {
  for_each_share(m, n, k, 32, 32, [&](int64_t s0, int64_t s1, int64_t q0, int64_t q1) {
    f(s0 * 32, std::min(m, s1 * 32), q0 * 32, std::min(n, q1 * 32));
  });
}

// The product on the AMX tiles, each finished 32 x 32 block through Int8RowsEpilogue while in L1 (int32 C
// without ep, else ep's output): run(r0, r1, c0, c1, product) per thread's share, where product(ep, c, ldc)
// computes the share into ep's output (or C).
template <class Run>
void gemm_amx(int64_t m, int64_t n, int64_t k, const Int8A& a, const int8_t* b, int64_t ldb, const Run& run) {
  thread_local AlignedBuffer<int8_t> copy;  // A padded, where the caller did not write it so
  const int8_t* rows = a.rows;
  int64_t lda = a.lda;
  if (!a.amx_padded) {
    lda = amx_int8_lda(k);
    int8_t* d = copy.get(size_t(amx_int8_rows(m) * lda));
    amx_int8_copy_rows(m, k, a.rows, a.lda, d);
    rows = d;
  }
  const auto epilogue = HWY_DYNAMIC_DISPATCH(Int8RowsEpilogue);
  for_each_amx_part(m, n, k, [&](int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
    run(r0, r1, c0, c1, [&](const Int8Epilogue* ep, int32_t* c, int64_t ldc) {
      amx_int8_gemm_part(k, rows, lda, b, ldb, r0, r1, c0, c1,
                         [&](const int32_t* t, int64_t i0, int64_t nr, int64_t j0, int64_t nc) {
                           epilogue(t, 32, i0, nr, j0, nc, ep, c, ldc);
                         });
    });
  });
}

void gemm_s8s8(int64_t m, int64_t n, int64_t k, const Int8A& a, const int8_t* b, int64_t ldb, int32_t* c,
               int64_t ldc, const Int8Epilogue* ep) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    const std::vector<int32_t> zeros(size_t(n), 0);
    for (int64_t i = 0; i < m; ++i) {
      if (ep)
        epilogue_scalar(i, 1, 0, n, zeros.data(), 0, *ep);
      else
        std::fill(c + i * ldc, c + i * ldc + n, 0);
    }
    apply_activation(ep, 0, m, 0, n);
    return;
  }
  if (a.rows && int8_rows_use_amx(m, n, k)) {
    gemm_amx(m, n, k, a, b, ldb, [&](int64_t, int64_t, int64_t, int64_t, const auto& product) { product(ep, c, ldc); });
    return;
  }
  for_each_int8_part(m, n, k, [&](int64_t s0, int64_t s1, int64_t q0, int64_t q1) {
    run_part(m, n, k, a, b, ldb, c, ldc, ep, s0, s1, q0, q1);
  });
}

void gemm_s8s8_parts(int64_t m, int64_t n, int64_t k, const Int8A& a, const int8_t* b, int64_t ldb,
                     const Int8Epilogue& ep, const GemmParts& parts) {
  check(!ep.act, "gemm", "an int8 GEMM delivered in parts applies no activation (the parts' consumer does)");
  if (m <= 0 || n <= 0) return;
  auto part = [&](int64_t r0, int64_t r1, int64_t c0, int64_t c1, const std::function<void(const Int8Epilogue&)>& run) {
    Int8Epilogue e = ep;
    e.store_f32 = true;
    e.y = parts.begin(r0, r1, c0, c1, &e.ldy);
    e.y_row0 = r0;
    e.y_col0 = c0;
    run(e);
    parts.end(r0, r1, c0, c1, static_cast<const float*>(e.y), e.ldy);
  };
  if (k <= 0) {  // the epilogue of an all-zero product, as gemm_s8s8
    const std::vector<int32_t> zeros(size_t(n), 0);
    part(0, m, 0, n, [&](const Int8Epilogue& e) {
      for (int64_t i = 0; i < m; ++i) epilogue_scalar(i, 1, 0, n, zeros.data(), 0, e);
    });
    return;
  }
  if (a.rows && int8_rows_use_amx(m, n, k)) {
    gemm_amx(m, n, k, a, b, ldb, [&](int64_t r0, int64_t r1, int64_t c0, int64_t c1, const auto& product) {
      if (r1 > r0 && c1 > c0) part(r0, r1, c0, c1, [&](const Int8Epilogue& e) { product(&e, nullptr, 0); });
    });
    return;
  }
  for_each_int8_part(m, n, k, [&](int64_t s0, int64_t s1, int64_t q0, int64_t q1) {
    const int64_t r0 = s0 * kMR, r1 = std::min(m, s1 * kMR), c0 = q0 * kNR, c1 = std::min(n, q1 * kNR);
    if (r1 <= r0 || c1 <= c0) return;
    part(r0, r1, c0, c1, [&](const Int8Epilogue& e) { run_part(m, n, k, a, b, ldb, nullptr, 0, &e, s0, s1, q0, q1); });
  });
}

Int8A strips_of(const int16_t* a_packed) {
  Int8A a;
  a.strips = a_packed;
  return a;
}
Int8A rows_of(const int8_t* rows, int64_t lda, bool amx_padded = false) {
  Int8A a;
  a.rows = rows;
  a.lda = lda;
  a.amx_padded = amx_padded;
  return a;
}

}  // namespace

void gemm_s8s8_packed(int64_t m, int64_t n, int64_t k, const int16_t* a_packed, const int8_t* b, int64_t ldb,
                      int32_t* c, int64_t ldc, const Int8Epilogue* ep) {
  gemm_s8s8(m, n, k, strips_of(a_packed), b, ldb, c, ldc, ep);
}

void gemm_s8s8_packed_parts(int64_t m, int64_t n, int64_t k, const int16_t* a_packed, const int8_t* b, int64_t ldb,
                            const Int8Epilogue& ep, const GemmParts& parts) {
  gemm_s8s8_parts(m, n, k, strips_of(a_packed), b, ldb, ep, parts);
}

void gemm_s8s8_rows(int64_t m, int64_t n, int64_t k, const int8_t* a, int64_t lda, const int8_t* b, int64_t ldb,
                    int32_t* c, int64_t ldc, const Int8Epilogue* ep, bool amx_padded) {
  gemm_s8s8(m, n, k, rows_of(a, lda, amx_padded), b, ldb, c, ldc, ep);
}

void gemm_s8s8_rows_parts(int64_t m, int64_t n, int64_t k, const int8_t* a, int64_t lda, const int8_t* b,
                          int64_t ldb, const Int8Epilogue& ep, const GemmParts& parts, bool amx_padded) {
  gemm_s8s8_parts(m, n, k, rows_of(a, lda, amx_padded), b, ldb, ep, parts);
}

void gemm_s8s8s32(int64_t m, int64_t n, int64_t k, const int8_t* a, int64_t lda, const int8_t* b,
                  int64_t ldb, int32_t* c, int64_t ldc) {
  gemm_s8s8_rows(m, n, k, a, lda, b, ldb, c, ldc, nullptr);
}

}  // namespace diffq::backend::cpu
#endif
