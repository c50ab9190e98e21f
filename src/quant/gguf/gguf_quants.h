// GGUF (ggml) quantization types: one traits table (type -> block elements/bytes, reference row
// dequantizer, reference quantizer) and the scalar reference functions it points to. The CPU's SIMD row
// dequantizers (bit-identical) live in backend/cpu/quant/gguf_dequant.h.
//
// Block sizes and bytes come from io::ggml_type_info (the reader's table, the single source); block
// layouts from blocks.h. Reference behaviour (tests/quant/test_gguf_*.cpp, fixtures made by
// tools/reference/make_quant_gguf.py):
//   dequantize_row_*: bit-exact (f32) with gguf-py 0.19's gguf.quants.dequantize;
//   quantize_row_*:   bit-exact with gguf-py's gguf.quants.quantize where it can quantize (F32, F16,
//                     BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) and with ggml's quantize_row_*_ref (through
//                     ggml_quantize_chunk without an importance matrix) for every type, K-quants and
//                     IQ4_NL/IQ4_XS included.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "io/gguf.h"
#include "quant/gguf/blocks.h"

namespace diffq::quant::gguf {

// The ggml types diffq can dequantize and quantize (the list Diffusers' GGUF loader supports).
enum class GGMLType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q2_K = 10, Q3_K = 11,
  Q4_K = 12, Q5_K = 13, Q6_K = 14, IQ4_NL = 20, IQ4_XS = 23, BF16 = 30,
};

// n = number of elements, a multiple of the type's block size; blocks are `n / block_size` blocks.
using DequantizeRowFn = void (*)(const void* blocks, float* dst, int64_t n);
using QuantizeRowFn = void (*)(const float* src, void* blocks, int64_t n);

struct TypeTraits {
  GGMLType type;
  const io::GGMLTypeInfo* info;     // name ("Q4_K"), block_size, type_size: io's table
  DequantizeRowFn dequantize_ref;   // scalar reference
  QuantizeRowFn quantize_ref;       // ggml's reference quantizer
  bool gguf_py_quantizes;           // gguf-py 0.19 can quantize this type too (and agrees bit for bit)

  std::string_view name() const { return info->name; }
  int64_t block_size() const { return info->block_size; }
  int64_t type_size() const { return info->type_size; }
  // Bytes of `n` elements; throws unless n is a multiple of the block size.
  int64_t row_bytes(int64_t n) const;
  // quantize_ref on `rows` rows of k elements (src row stride k, dst row stride row_bytes(k)), rows in
  // parallel over the CPU pool (each row's bytes do not depend on the split).
  void quantize_rows(const float* src, int64_t rows, int64_t k, uint8_t* dst) const;
};

std::span<const TypeTraits> supported_types();
const TypeTraits* find_type(GGMLType t);
const TypeTraits* find_type(uint32_t ggml_id);
// Throws "[gguf] <what> has ggml type <name or id>, which diffq cannot dequantize (supported: ...)".
const TypeTraits& type_or_throw(uint32_t ggml_id, std::string_view what);
// "Q4_K", "q4_k", "q4_K", "gguf_q4_k" -> Q4_K; nullopt for unknown or unsupported names.
std::optional<GGMLType> parse_type(std::string_view name);
std::string supported_type_names();  // "F32, F16, BF16, Q4_0, ..."

// ---- scalar references (dst/src hold n elements) --------------------------------------------------
void dequantize_row_f32(const void* x, float* y, int64_t n);
void dequantize_row_f16(const void* x, float* y, int64_t n);
void dequantize_row_bf16(const void* x, float* y, int64_t n);
void dequantize_row_q4_0(const void* x, float* y, int64_t n);
void dequantize_row_q4_1(const void* x, float* y, int64_t n);
void dequantize_row_q5_0(const void* x, float* y, int64_t n);
void dequantize_row_q5_1(const void* x, float* y, int64_t n);
void dequantize_row_q8_0(const void* x, float* y, int64_t n);
void dequantize_row_q2_K(const void* x, float* y, int64_t n);
void dequantize_row_q3_K(const void* x, float* y, int64_t n);
void dequantize_row_q4_K(const void* x, float* y, int64_t n);
void dequantize_row_q5_K(const void* x, float* y, int64_t n);
void dequantize_row_q6_K(const void* x, float* y, int64_t n);
void dequantize_row_iq4_nl(const void* x, float* y, int64_t n);
void dequantize_row_iq4_xs(const void* x, float* y, int64_t n);

void quantize_row_f32(const float* x, void* y, int64_t n);
void quantize_row_f16(const float* x, void* y, int64_t n);   // round to nearest even (numpy astype)
void quantize_row_bf16(const float* x, void* y, int64_t n);  // ggml: RNE, NaN kept quiet with its sign
void quantize_row_q4_0(const float* x, void* y, int64_t n);
void quantize_row_q4_1(const float* x, void* y, int64_t n);
void quantize_row_q5_0(const float* x, void* y, int64_t n);
void quantize_row_q5_1(const float* x, void* y, int64_t n);
void quantize_row_q8_0(const float* x, void* y, int64_t n);
void quantize_row_q2_K(const float* x, void* y, int64_t n);
void quantize_row_q3_K(const float* x, void* y, int64_t n);
void quantize_row_q4_K(const float* x, void* y, int64_t n);
void quantize_row_q5_K(const float* x, void* y, int64_t n);
void quantize_row_q6_K(const float* x, void* y, int64_t n);
void quantize_row_iq4_nl(const float* x, void* y, int64_t n);
void quantize_row_iq4_xs(const float* x, void* y, int64_t n);

}  // namespace diffq::quant::gguf
