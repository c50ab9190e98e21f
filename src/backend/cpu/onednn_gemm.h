// bf16 x bf16 -> f32 (and s8 x s8 -> s32) GEMMs on oneDNN's matmul primitive, for the CPUs with bf16 matrix instructions
// (AVX512-BF16's vdpbf16ps, AMX-BF16 tiles), where oneDNN's brgemm kernels multiply bf16 pairs natively
// instead of widening them to f32 as diffq's blocked kernel does. Used by gemm.cpp for one part of C
// at a time, on the diffq pool thread that owns the part (oneDNN's own OpenMP threads stay at one per
// caller, so they never spin against the pool). Primitives are created once per part shape and cached.
#pragma once

#include <cstdint>
#include <string>

namespace diffq::backend::cpu {

// Whether this CPU has bf16 matrix instructions oneDNN uses (AVX512-BF16, or AMX-BF16 with the tile
// state granted by the kernel) and oneDNN gives a native (brgemm / jit) implementation for a bf16 matmul.
bool onednn_bf16_available();

// Whether those instructions are AMX tiles (where oneDNN's bf16 matmul is ~5x the f32 FMA rate; on
// AVX512-BF16 alone it is slower than diffq's pair kernel on Intel, faster on AMD: docs/benchmarks.md
// "Session 7", "bf16 GEMM on oneDNN on AMD"; onednn_bf16_preferred() is the default that follows).
bool onednn_bf16_uses_amx();

// Whether diffq's bf16 GEMMs go to oneDNN by default (gemm.cpp): its bf16 matmul is on AMX tiles, or
// the CPU is an AMD one with AVX512-BF16 and oneDNN runs its brgemm on it (brg:avx512_core_bf16; measured faster there
// than diffq's pair kernel; on Intel without AMX slower: docs/benchmarks.md).
bool onednn_bf16_preferred();

// oneDNN's implementation name for a representative bf16 matmul here ("brg:avx512_core_bf16",
// "brg:avx512_core_amx"), or why none ("unavailable: ...").
std::string onednn_bf16_impl();

// C[m, n] = alpha * op(A) @ op(B) + beta * C for one part, single-threaded; A, B bf16 bits, C f32.
// Returns false (computing nothing) where oneDNN has no native kernel for this shape and layout.
bool onednn_gemm_bf16_part(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                           const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, float beta, float* c,
                           int64_t ldc);

// The bf16 linear's part with its epilogue in oneDNN: y[m, n] = bf16(x[m, k] @ w[n, k]^T + bias[n]) (f32
// accumulation, the bias added in f32, one round to nearest even; bias may be null), single-threaded.
// False (nothing written) where oneDNN has no native kernel for it.
bool onednn_linear_bf16_part(int64_t m, int64_t n, int64_t k, const uint16_t* x, int64_t ldx, const uint16_t* w,
                             int64_t ldw, const float* bias, uint16_t* y, int64_t ldy);

// bf16 linear weights packed once (at load) into the blocked layout oneDNN's brgemm reads its B operand
// in, instead of oneDNN copying W into it on every call: B = W^T [k, n] as blocks of
// kOnednnPackedCols columns (outermost; the last one zero-padded), each k (padded to 32) x 64 with pairs
// of k innermost (oneDNN's BA16a64b2a). The columns [c0, c0 + cols) for c0 a multiple of
// kOnednnPackedCols are the packed B of those columns alone, at element onednn_packed_bf16_elems(c0, k).
// onednn_bf16_packing_usable(): oneDNN runs the same native kernel on packed as on plain weights here.
inline constexpr int64_t kOnednnPackedCols = 64;
bool onednn_bf16_packing_usable();
int64_t onednn_packed_bf16_elems(int64_t n, int64_t k);  // the packed size of W[n, k], padding included
// W[n, k] (row stride ldw) -> packed (onednn_packed_bf16_elems(n, k) elements), and back to dense rows
// (row stride k): copies, exact both ways.
void onednn_pack_bf16_weight(int64_t n, int64_t k, const uint16_t* w, int64_t ldw, uint16_t* packed);
void onednn_unpack_bf16_weight(int64_t n, int64_t k, const uint16_t* packed, uint16_t* w);
// A bf16 B[k, n] given by its own rows (row stride ldb; attention's V blocks) packed the same way.
void onednn_pack_bf16_b(int64_t k, int64_t n, const uint16_t* b, int64_t ldb, uint16_t* packed);
// C[m, n] (f32) = A[m, k] @ B (+ C when accumulate) with B packed, A and C dense rows (lda = k, ldc = n:
// oneDNN 2.6's brgemm reads and writes no wider rows with packed B), single-threaded. False where oneDNN
// declines it.
bool onednn_gemm_bf16_packed_b_part(int64_t m, int64_t n, int64_t k, const uint16_t* a, const uint16_t* b_packed,
                                    bool accumulate, float* c);
// onednn_linear_bf16_part with the weight's columns packed: w_packed points at the packed columns'
// start (see above). The same values as onednn_linear_bf16_part on the plain weight.
bool onednn_linear_bf16_packed_part(int64_t m, int64_t n, int64_t k, const uint16_t* x, int64_t ldx,
                                    const uint16_t* w_packed, const float* bias, uint16_t* y, int64_t ldy);
// The same with the f32 sums (bias added, not rounded) written to c: compile's GEMM epilogue parts.
bool onednn_linear_bf16_packed_part_f32(int64_t m, int64_t n, int64_t k, const uint16_t* x, int64_t ldx,
                                        const uint16_t* w_packed, const float* bias, float* c, int64_t ldc);

// int8: C[m, n] (int32) = A[m, k] @ B[n, k]^T, exact (torchao int8dq's product), single-threaded, on
// oneDNN's VNNI / AMX-INT8 kernels. onednn_int8_available(): the CPU has AVX512-VNNI or usable AMX-INT8
// and oneDNN a native kernel; onednn_int8_impl() its name or why none.
bool onednn_int8_available();
std::string onednn_int8_impl();
bool onednn_gemm_s8s8s32_part(int64_t m, int64_t n, int64_t k, const int8_t* a, int64_t lda, const int8_t* b,
                              int64_t ldb, int32_t* c, int64_t ldc);
// The same product with torchao int8dq's first rounding inside oneDNN's store: C[m, n] (bf16, dense rows) =
// bf16(float(A B^T) x s[i]) (s per row of C; one_scale: s[0] for all), the int8 epilogue's first step (a
// binary multiply post-op: the s32 -> f32 conversion, one f32 product, one round to nearest even; but
// vcvtneps2bf16 takes denormal products as zero). oneDNN writes half the bytes of the int32 C.
bool onednn_gemm_s8s8_row_scaled_bf16_part(int64_t m, int64_t n, int64_t k, const int8_t* a, int64_t lda,
                                           const int8_t* b, int64_t ldb, const float* s, bool one_scale, uint16_t* c);

// f32: the same for f32 operands (oneDNN's AVX-512 brgemm / jit GEMM); false without AVX-512.
std::string onednn_f32_impl();
bool onednn_sgemm_part(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                       int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

}  // namespace diffq::backend::cpu
