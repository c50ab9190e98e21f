// int8 x int8 -> int32 GEMM (the matmul of dynamic int8 activation x int8 weight quantization, torch's
// _int_mm): C[M, N] = A[M, K] @ B[N, K]^T, exact integer arithmetic, row-major with row strides.
//
// Without AVX-512 VNNI the fast exact product is vpmaddwd: operands sign-extended to int16, pairs of
// products summed into int32 lanes (no saturation: |a*b + c*d| <= 2^15). The u8*s8 vpmaddubsw route is
// not used: it saturates int16 sums for full-range operands (torchao's reduce_range exists for that).
//
// Layout and loops. A is packed once per call into strips of 6 rows (per k-pair, the 6 rows' int16
// pairs; activation quantization writes this form directly). Each thread owns a range of 16-column B
// panels; per (256-column, 512-deep) block it widens its B block once into panels (a vectorised
// int8 -> int16 transpose; 256 KiB, L2-resident), then runs a 6 x 16 register tile for every A strip
// against every panel of the block, the strip's slice staying in L1. Partial int32 sums over K blocks
// live in a per-thread tile buffer; the last K block hands each finished tile to the epilogue (int32
// store, or the int8 linear's scale / bias / cast), so no M x N int32 matrix is written.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "backend/cpu/gemm.h"
#include "diffq/dtype.h"
#include "ops/op.h"

namespace diffq::backend::cpu {

// Packed A: ceil(m / 6) strips; strip s, k-pair p holds 6 int32 words, word r being the int16 pair
// (a[6s + r, 2p], a[6s + r, 2p + 1]). Rows past m and the odd tail of k are zero.
inline constexpr int64_t kInt8StripRows = 6;
inline int64_t int8_packed_a_pairs(int64_t k) { return (k + 1) / 2; }
// int16 elements of one strip and of the whole packed A.
inline int64_t int8_packed_strip_elems(int64_t k) { return int8_packed_a_pairs(k) * 2 * kInt8StripRows; }
inline size_t int8_packed_a_elems(int64_t m, int64_t k) {
  return size_t((m + kInt8StripRows - 1) / kInt8StripRows * int8_packed_strip_elems(k));
}

// Packs row-major int8 A [m, k] (multithreaded).
void pack_a_s8(int64_t m, int64_t k, const int8_t* a, int64_t lda, int16_t* dst);
// Writes row `r` (0..5) of a packed strip from k int16 values (already in int8 range); the odd k tail
// gets a zero partner. Used by the activation quantizer.
void pack_a_row_s16(const int16_t* row, int64_t k, int16_t* strip, int64_t r);

// The int8 linear's output: y[i, j] = round(out, round(out, float(c[i, j]) * row_scale[i]) * col_scale[j]
// + bias[j]) stored as `out` (f32, bf16 or f16), where round(dt, v) is v rounded to dt and back.
// row_scale has m entries (one when per_tensor); bias may be null (then no addition).
// With store_f32 the values (rounded to `out` all the same) are stored as f32, and element (i, j) goes to
// y[(i - y_row0) * ldy + (j - y_col0)] (a part of the output, gemm_s8s8_packed_parts).
struct Int8Epilogue {
  const float* row_scale = nullptr;
  bool per_tensor = false;
  const float* col_scale = nullptr;
  const float* bias = nullptr;
  DType out = DType::f32;
  void* y = nullptr;
  int64_t ldy = 0;  // elements
  bool store_f32 = false;
  int64_t y_row0 = 0, y_col0 = 0;
  // linear_q_act's activation of the output (never with store_f32), the unary op's values: in the epilogue's
  // registers (bf16 outputs by the function's table, f32 GELU), else applied to each block of y right after
  // its epilogue, while in cache (row_kernels.h: unary_rows_in_place).
  std::optional<ops::UnaryFn> act;
};

// The GEMM on packed A. With ep == nullptr writes int32 C[m, n] (row stride ldc); otherwise writes
// ep's output and c is unused. Multithreaded with the diffq thread count.
void gemm_s8s8_packed(int64_t m, int64_t n, int64_t k, const int16_t* a_packed, const int8_t* b, int64_t ldb,
                      int32_t* c, int64_t ldc, const Int8Epilogue* ep);

// The same GEMM with ep's output delivered part by part (compile's GEMM epilogue): the parts are the
// threads' shares (rows x columns of y) of gemm_s8s8_packed; parts.begin gives where each goes (f32, row
// stride *ld), ep is applied with store_f32 (ep's y / ldy / origin are set per part), and parts.end
// receives the part right after it is finished, on the same thread.
void gemm_s8s8_packed_parts(int64_t m, int64_t n, int64_t k, const int16_t* a_packed, const int8_t* b, int64_t ldb,
                            const Int8Epilogue& ep, const GemmParts& parts);

// The same two on row-major int8 A (row stride lda): the AMX-INT8 tiles (int8_gemm_amx.h) and oneDNN read
// these rows in place (no strips); where the tile runs (no VNNI / AMX-INT8, a forced diffq kernel, a part
// oneDNN declines) each thread packs its share of the rows into strips first. The activation quantizer
// writes this form where oneDNN or the AMX tiles run: for the tiles (int8_rows_use_amx) at the row stride
// amx_int8_lda(k) with the zero padding amx_int8_copy_rows writes (amx_padded: A is in that form, aligned;
// otherwise the tiles copy it).
void gemm_s8s8_rows(int64_t m, int64_t n, int64_t k, const int8_t* a, int64_t lda, const int8_t* b, int64_t ldb,
                    int32_t* c, int64_t ldc, const Int8Epilogue* ep, bool amx_padded = false);
void gemm_s8s8_rows_parts(int64_t m, int64_t n, int64_t k, const int8_t* a, int64_t lda, const int8_t* b,
                          int64_t ldb, const Int8Epilogue& ep, const GemmParts& parts, bool amx_padded = false);

// Whether an m x n x k product of int8 rows runs on the AMX-INT8 tiles under the current tuning (the CPU has
// them, the shape has enough rows to amortise copying W into the tiles' layout).
bool int8_rows_use_amx(int64_t m, int64_t n, int64_t k);

// C[m, n] = sum_k A[m, k] * B[n, k] (gemm_s8s8_rows without an epilogue).
void gemm_s8s8s32(int64_t m, int64_t n, int64_t k, const int8_t* a, int64_t lda, const int8_t* b,
                  int64_t ldb, int32_t* c, int64_t ldc);

// The kernel the int8 GEMM runs here under the current tuning, in words (`diffq info`).
std::string int8_gemm_kernel_name();
// Whether it is oneDNN's (AVX512-VNNI / AMX-INT8) under the current tuning, for the products the AMX tiles
// do not take; exact either way.
bool int8_uses_onednn();
// Whether the AMX-INT8 tiles run the products of int8 rows (int8_rows_use_amx): the CPU has AMX-INT8, oneDNN's
// int8 matmul runs on AMX too (so DNNL_MAX_CPU_ISA below AMX turns both off), and the GEMM kernel is `best`.
bool int8_uses_amx();

// Scalar references (the tests' oracles).
void gemm_s8s8s32_reference(int64_t m, int64_t n, int64_t k, const int8_t* a, int64_t lda,
                            const int8_t* b, int64_t ldb, int32_t* c, int64_t ldc);
void int8_epilogue_reference(int64_t m, int64_t n, const int32_t* c, int64_t ldc, const Int8Epilogue& ep);

}  // namespace diffq::backend::cpu
