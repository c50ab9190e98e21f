// Dequantization kernels of the quantized linears on CUDA (linear_q: the weight dequantized into a buffer
// of the activation's dtype, then the dense cuBLASLt GEMM). Host-callable launchers on plain pointers, so
// the scheme-side host code (linear_q_*.cpp) never goes through nvcc.
#pragma once

#include <cstdint>

#include "backend/cuda/quant/block_values.cuh"
#include "diffq/dtype.h"

namespace diffq::backend::cuda {

// torchao's affine int8 codes (Int8Tensor / IntxUnpackedToInt8Tensor): W[n, k] = dequantize_one(q[n, k],
// zp[b], scale[b]) with block b = (n / bn) * (K / bk) + k / bk, exactly torchao's dequantize(out) (affine.h):
// (q - zp) rounded to `out`, times the scale in the promoted dtype, rounded to `out`. On the current device.
void dequant_affine_int8(const int8_t* q, const void* scale, DType scale_dtype, const int8_t* zp, int64_t N,
                         int64_t K, int64_t bn, int64_t bk, void* out, DType out_dtype, int device);

// The 256 values of a float8 dtype's codes as f32 (the host's f8_to_f32, so every code, NaN included,
// decodes to the CPU's bits), passed by value to the kernel.
struct Float8Table {
  float v[256];
};

// torchao's Float8Tensor weight: W[n, k] = round_through(round_dtype, table[q[n, k]] * scale[b]) stored as
// out_dtype, block b = (n / bn) * (K / bk) + k / bk, scale f32 (torchao's dequantize(round_dtype)).
void dequant_float8(const uint8_t* q, const Float8Table& table, const float* scale, int64_t N, int64_t K,
                    int64_t bn, int64_t bk, DType round_dtype, void* out, DType out_dtype, int device);

// A GGUF weight [N, K] stored as rows of `row_bytes` bytes of blocks (`block_size` elements in `type_size`
// bytes each, ggml type `type`: blockq::gguf_type_decodable): every element decoded as gguf-py's
// dequantize (f32), rounded through `round_dtype` (Diffusers' GGUFLinear: weight.to(compute_dtype)),
// stored as out_dtype.
void dequant_gguf(const uint8_t* data, uint32_t type, int64_t N, int64_t K, int64_t row_bytes, int64_t block_size,
                  int64_t type_size, DType round_dtype, void* out, DType out_dtype, int device);

// A bitsandbytes 4-bit weight of n elements (flat, row-major [N, K]): code x absmax in f32 (bnb's
// dequantize_4bit), one rounding to out_dtype. absmax: f32 [blocks], or with p.nested uint8 codes with
// nested_absmax f32 and nested_map f32 [256].
void dequant_bnb4(const blockq::Bnb4Params& p, const uint8_t* packed, const void* absmax, const float* nested_absmax,
                  const float* nested_map, int64_t n, void* out, DType out_dtype, int device);

// torchao's Int4Tensor [N, K] (blockq::torchao_int4_value, f32) stored as out_dtype.
void dequant_torchao_int4(const uint8_t* q, const void* scale, const void* zero, DType scale_dtype, int64_t N,
                          int64_t K, int64_t group, void* out, DType out_dtype, int device);

// A quanto weight [N, K] (blockq::quanto_value in its dtype) rounded through `round_dtype`, stored as
// out_dtype. f8: the float8_e4m3fn table (float8 weights).
void dequant_quanto(const blockq::QuantoParams& p, const uint8_t* data, const void* scale, const void* shift,
                    const Float8Table& f8, int64_t N, DType round_dtype, void* out, DType out_dtype, int device);

// An SDNQ weight [N, K] (blockq::sdnq_value) rounded through `round_dtype`, stored as out_dtype.
void dequant_sdnq(const blockq::SdnqParams& p, const uint8_t* w, const void* scale, const void* zero,
                  const Float8Table& f8, int64_t N, DType round_dtype, void* out, DType out_dtype, int device);

// An AutoRound weight [N, K] (blockq::autoround_value in `compute`), stored as out_dtype.
void dequant_autoround(const blockq::AutoRoundParams& p, const uint32_t* qweight, const uint32_t* qzeros,
                       const void* scales, const void* g_idx, DType compute, void* out, DType out_dtype, int device);

// A BFL / ModelOpt scaled weight [N, K] (blockq::scaled_value, f32) rounded through `round_dtype`, stored as
// out_dtype.
void dequant_scaled(const blockq::ScaledParams& p, const uint8_t* q, const void* scale, const Float8Table& f8,
                    int64_t N, DType round_dtype, void* out, DType out_dtype, int device);

// A bitsandbytes LLM.int8 weight in the dequantize_fp mode [N, K]: blockq::bnb8_fp_weight (codes int8, scb
// f32 [N]) rounded to `round_dtype` (x's dtype), stored as out_dtype.
void dequant_bnb8_fp(const int8_t* q, const float* scb, int64_t N, int64_t K, DType round_dtype, void* out,
                     DType out_dtype, int device);

// A Nunchaku AWQ W4A16 weight [N, K] (blockq::awq_value, f32: qweight int32 [N/4, K/2], wscales / wzeros f32
// [K/64, N]) rounded through `round_dtype`, stored as out_dtype.
void dequant_nunchaku_awq(const int32_t* qweight, const float* wscales, const float* wzeros, int64_t N, int64_t K,
                          DType round_dtype, void* out, DType out_dtype, int device);

}  // namespace diffq::backend::cuda
