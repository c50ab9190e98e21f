// The CPU GEMM entry points every matmul-shaped op uses. Which kernel implements them is chosen by
// measurement (docs/benchmarks.md "CPU GEMM (issue 2)", bench/bench_gemm_*.cpp,
// bench/run_gemm_bench.sh); callers never name a library. Currently: f32 OpenBLAS; bf16 diffq's own
// blocked kernel (sgemm_kernel.h, bf16 widened while packing) from 16 rows and columns, otherwise
// widened blocks + OpenBLAS (see gemm.cpp, gemm_uses_diffq_kernel).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "ops/op.h"

namespace diffq::backend::cpu {

struct Tuning;

// Below this many multiply-adds a GEMM runs on the calling thread, whatever the tuning.
inline constexpr double kGemmParallelMacs = 1 << 18;

// How sgemm / gemm_bf16 split C[m, n] over `threads` pool threads under tuning `t`: along n
// (split_n) or m, into `parts` parts starting at multiples of 16; parts == 1: one call on the calling
// thread. The autotuner compares candidate tunings by this.
struct GemmSplitPlan {
  bool split_n = false;
  int64_t parts = 1;
  bool operator==(const GemmSplitPlan&) const = default;
  auto operator<=>(const GemmSplitPlan&) const = default;
};
GemmSplitPlan gemm_split_plan(int64_t m, int64_t n, int64_t k, int threads, const Tuning& t);

// Whether sgemm (bf16 = false) / gemm_bf16 (bf16 = true) compute the parts of this GEMM with diffq's
// blocked kernel (sgemm_kernel.h) rather than OpenBLAS: t.gemm_kernel, and for GemmKernel::best a
// fixed function of the dtype and shape (where the blocked kernel measured faster).
bool gemm_uses_diffq_kernel(bool bf16, int64_t m, int64_t n, const Tuning& t);

// Whether gemm_bf16 / gemm_bf16_parts compute this GEMM's parts with oneDNN's matmul (onednn_gemm.h):
// t.gemm_kernel == onednn, or `best` on a CPU with native bf16 matrix instructions.
bool gemm_bf16_uses_onednn(int64_t m, int64_t n, const Tuning& t);

// Whether gemm_bf16 / gemm_bf16_parts compute this GEMM's parts with diffq's bf16-pair kernel
// (bf16_dot_gemm.h): `best` or `diffq` where bf16_dot_gemm_usable() (after oneDNN on AMX for `best`),
// every shape.
bool gemm_bf16_uses_dot(int64_t m, int64_t n, const Tuning& t);

// Whether gemm_bf16 multiplies bf16 natively for this shape (oneDNN or the bf16-pair kernel) instead of
// widening it to f32: where bf16 operands pay off over f32 ones (convolutions, quantized tiles).
bool gemm_bf16_native(int64_t m, int64_t n, const Tuning& t);

// Whether sgemm / sgemm_parts compute this GEMM's parts with oneDNN's f32 matmul: on AVX-512 CPUs, by
// default or forced (GemmKernel::onednn).
bool gemm_f32_uses_onednn(int64_t m, int64_t n, const Tuning& t);

// True where OpenBLAS runs pre-AVX2 kernels on a CPU with AVX2 + FMA (its DYNAMIC_ARCH does not know the
// CPU model and fell back): then f32 GEMMs go to diffq's blocked kernel too.
bool openblas_lacks_this_cpu();

// The kernel a large f32 (bf16 = false) or bf16 GEMM runs on this machine under the current tuning, in
// words ("openblas 0.3.21", "diffq-blocked (AVX3)"): what `diffq info` and the benchmarks report.
std::string gemm_kernel_name(bool bf16);

// C[M, N] = alpha * op(A) @ op(B) + beta * C, row-major, f32. op(X) = X^T when trans_X.
// lda/ldb/ldc are row strides in elements. Multithreaded with the diffq thread count.
void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// Same with bf16 (raw uint16 bits) A and B, f32 accumulation and f32 C. Uses per-thread scratch kept
// between calls (packed blocks; up to 2 x 16 MiB of widened blocks on the OpenBLAS path).
void gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
               const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, float beta, float* c,
               int64_t ldc);

// C[m, n] = alpha * op(A) @ B + beta * C, bf16 A and B, f32 C, with B given by its rows:
// B[kk, j] = b_rows[kk][b_col0 + j] (an implicit convolution: rows are shifted views of the padded
// input). The bf16 dot kernel reads the rows in place; elsewhere column blocks are gathered into a
// contiguous copy (<= 4 MiB) for gemm_bf16. Same parts and threads as gemm_bf16.
void gemm_bf16_rows(bool trans_a, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a, int64_t lda,
                    const uint16_t* const* b_rows, int64_t b_col0, float beta, float* c, int64_t ldc);

// The bf16 linear written straight to a bf16 output where the bf16 kernel is oneDNN: y[m, n] =
// bf16(x[m, k] @ w[n, k]^T + bias[n]) with the bias and the one rounding inside oneDNN's primitive (no
// f32 C, no bias fill, no rounding pass; bias may be null). Same parts and threads as gemm_bf16; a part
// oneDNN declines goes through the f32 path (same values). Returns false, writing nothing, where the
// bf16 kernel is not oneDNN (the caller's f32 C path runs).
bool gemm_bf16_linear_to_bf16(int64_t m, int64_t n, int64_t k, const uint16_t* x, int64_t ldx, const uint16_t* w,
                              int64_t ldw, const float* bias, uint16_t* y, int64_t ldy);

// Whether a packed linear of m rows runs on diffq's AMX-BF16 tiles (bf16_gemm_amx.h) rather than oneDNN's
// brgemm: the CPU has AMX-BF16, oneDNN's bf16 matmul runs on AMX (the weights are packed for it), the tuning's
// GEMM kernel is `best` and the SIMD target AVX-512; at least 256 rows and K >= 3072 (where it was measured
// faster).
bool packed_bf16_uses_amx(int64_t m, int64_t k);

// The same linear with the weight packed for oneDNN (onednn_gemm.h: onednn_pack_bf16_weight): the parts
// split the rows (>= 64 a part), else the columns at multiples of kOnednnPackedCols, each part reading
// its columns' packed blocks in place. The same values as gemm_bf16_linear_to_bf16 on the plain weight (on
// the AMX tiles, packed_bf16_uses_amx, up to the f32 summation order: oneDNN groups K's partial sums otherwise).
// False where oneDNN declined a part's shape (y then partly written: the caller computes it otherwise).
// act: linear_q_act's activation, applied to each slice of y right after oneDNN wrote it (row_kernels.h:
// unary_rows_in_place, the unary op's values).
bool gemm_bf16_linear_packed(int64_t m, int64_t n, int64_t k, const uint16_t* x, int64_t ldx, const uint16_t* w_packed,
                             const float* bias, uint16_t* y, int64_t ldy,
                             std::optional<ops::UnaryFn> act = std::nullopt);

// The packed linear's f32 sums (bias added; rounded to bf16 values when round_bf16) part by part, as
// gemm_bf16_parts delivers them (GemmParts below; same part split as gemm_bf16_linear_packed). Throws
// where oneDNN declines a part.
struct GemmParts;
void gemm_bf16_linear_packed_parts(int64_t m, int64_t n, int64_t k, const uint16_t* x, int64_t ldx,
                                   const uint16_t* w_packed, const float* bias, const GemmParts& parts,
                                   bool round_bf16);

// A GEMM whose C is produced part by part (the same parts sgemm / gemm_bf16 split C into, so the
// same BLAS calls and the same bits): before part [r0, r1) x [c0, c1) of C is computed, `begin` says
// where it goes (a pointer to its element (r0, c0) and its row stride in *ld; it may be C itself or a
// scratch tile, already holding beta's C values when beta != 0); right after, on the same thread, while
// it is in cache, `end` consumes it (compile's GEMM epilogue: bias, GELU, gate * x + residual).
struct GemmParts {
  std::function<float*(int64_t r0, int64_t r1, int64_t c0, int64_t c1, int64_t* ld)> begin;
  std::function<void(int64_t r0, int64_t r1, int64_t c0, int64_t c1, const float* part, int64_t ld)> end;
};
void sgemm_parts(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                 int64_t lda, const float* b, int64_t ldb, float beta, const GemmParts& parts);
void gemm_bf16_parts(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                     const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, float beta,
                     const GemmParts& parts);

// Scalar references (f64 accumulation) used by tests as the oracle.
void sgemm_reference(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                     const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                     int64_t ldc);

}  // namespace diffq::backend::cpu
