// The f32 row kernels of the CPU backend's elementwise, unary and norm ops, callable from outside the
// backend: the eager kernels and compile's fused kernel (src/compile/fused_kernel.cpp) run this one
// implementation of each op's math (Highway, runtime-dispatched), so a fused graph computes exactly
// what eager does.
#pragma once

#include <cstdint>

#include "diffq/dtype.h"
#include "ops/op.h"

namespace diffq::backend::cpu {

void unary_row_f32(ops::UnaryFn fn, const float* x, float* y, int64_t n);
// rows x cols of y (dtype dt, rows `ld` elements apart, unit column stride) = fn(y) in place, as the unary op
// computes it (widened to f32, rounded once back to dt): linear_q_act's activation, applied by the linear
// kernels to a block of their output while it is in cache.
void unary_rows_in_place(ops::UnaryFn fn, DType dt, void* y, int64_t ld, int64_t rows, int64_t cols);
// fn on bf16 values as a table of the 65536 bf16 bit patterns: entry b is the unary op's bf16 result for
// the bf16 input b (the f32 row kernel on the exact widening, rounded once), built on first use for the
// SIMD target dispatch runs then (targets may differ in the last bit before rounding). One entry past
// the end (0) keeps 4-byte reads at any entry inside the table. A lookup costs a fraction of the
// functions' arithmetic (GELU: exp, a division) and gives the same bits.
const uint16_t* bf16_unary_table(ops::UnaryFn fn);
// y[i] = table[x[i * stride]] for i < n; y may be x (stride 1).
void bf16_table_row(const uint16_t* table, const uint16_t* x, int64_t stride, uint16_t* y, int64_t n);
// a_bcast / b_bcast: that operand is one value repeated over the row.
void binary_row_f32(ops::BinaryFn fn, const float* a, bool a_bcast, const float* b, bool b_bcast, float* y,
                    int64_t n);
// The same on bf16 rows of unit stride, widened exactly and rounded once to bf16 (as binary_row_f32 then
// a round to bf16); y may be a or b.
void binary_row_bf16(ops::BinaryFn fn, const uint16_t* a, const uint16_t* b, uint16_t* y, int64_t n);
// y[0, n) = r + y rounded once to dt (any float dtype; contiguous rows): conv2d_add's skip connection.
void add_row_into(DType dt, const void* r, void* y, int64_t n);
// y = a * b + c (mul_add's row: a product and a sum, each rounded to f32; the product also rounded through
// round_product_to unless that is f32), the scalar form of mul_add.cpp's vector rows.
void mul_add_row_reference(const float* a, bool a_bcast, const float* b, bool b_bcast, const float* c, bool c_bcast,
                           DType round_product_to, float* y, int64_t n);
// y = x * mul + add, then clamp to [lo, hi] when `clamp` (NaN stays NaN).
void affine_clamp_row_f32(const float* x, float* y, int64_t n, float mul, float add, bool clamp, float lo,
                          float hi);
// sum(x) and sum((x - shift)^2).
void sum_and_squares_f32(const float* x, int64_t n, float shift, double* sum, double* sq);
// y = (x - mean) * rstd * w + b, w / b optional (nullptr).
void normalize_row_f32(const float* x, float* y, int64_t n, float mean, float rstd, const float* w,
                       const float* b);

// Rotary embedding of one row on interleaved pairs (the rope op): y[2k] = x[2k] cs[2k] - x[2k+1] sn[2k],
// y[2k+1] = x[2k+1] cs[2k+1] + x[2k] sn[2k+1]; n even.
void rope_row_f32(const float* x, const float* cs, const float* sn, float* y, int64_t n);

}  // namespace diffq::backend::cpu
