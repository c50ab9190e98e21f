// GGUF (ggml) row dequantizers on the CPU: Highway (runtime dispatch) versions of the scalar references
// of quant/gguf/gguf_quants.h for the types that carry real models (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K),
// bit-identical to them.
#pragma once

#include "quant/gguf/gguf_quants.h"

namespace diffq::backend::cpu {

// The SIMD dequantizer of `t`, or nullptr where only the scalar reference exists.
quant::gguf::DequantizeRowFn gguf_simd_dequantizer(quant::gguf::GGMLType t);
// What the CPU runs for `t`: the SIMD dequantizer where there is one, else the type's reference.
quant::gguf::DequantizeRowFn gguf_dequantizer(quant::gguf::GGMLType t);

}  // namespace diffq::backend::cpu
