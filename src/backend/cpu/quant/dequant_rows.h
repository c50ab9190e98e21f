// The row dequantizers the CPU runs inside the tile linear (tile_linear.h): the schemes' reference
// dequant_rows (src/quant) with the CPU's SIMD kernels where it has them, bit for bit the same values
// (tests/quant compare each with its reference).
#pragma once

#include <cstdint>
#include <optional>

#include "diffq/tensor.h"
#include "quant/tile_linear_plan.h"

namespace diffq {
class QuantizedWeight;
}
namespace diffq::quant {
class Bnb4bitWeight;
class GGUFQuantizedWeight;
}
namespace diffq::quant::torchao {
class Int4Weight;
}

namespace diffq::backend::cpu {

// Bnb4bitWeight::dequant_rows(n0, n1, dst, round_to) (bnb_4bit_dequant.h, SIMD row converters).
void bnb_4bit_dequant_rows(const quant::Bnb4bitWeight& w, int64_t n0, int64_t n1, float* dst, DType round_to);
// GGUFQuantizedWeight::dequant_rows(n0, n1, dst) (gguf_dequant.h, SIMD row converters).
void gguf_dequant_rows(const quant::GGUFQuantizedWeight& w, int64_t n0, int64_t n1, float* dst);
// Int4Weight::dequant_rows(n0, n1, f32, dst) (torchao_int4_dequant.h).
void torchao_int4_dequant_rows(const quant::torchao::Int4Weight& w, int64_t n0, int64_t n1, float* dst);

// The weight's tile linear plan (QuantizedWeight::tile_linear_plan) as the CPU runs it: its row
// dequantizer replaced by the SIMD one above where the weight's scheme has one.
std::optional<quant::TileLinearPlan> cpu_tile_linear_plan(const QuantizedWeight& w, const Tensor& x,
                                                          const Tensor& bias);

}  // namespace diffq::backend::cpu
