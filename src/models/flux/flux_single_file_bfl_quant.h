// Single-file FLUX transformers quantized with BFL's fp8r / nvfp4 schemes (what Diffusers reads with
// FluxTransformer2DModel.from_single_file(..., quantization_config=BFLQuantizationConfig(...))), detected
// from the tensors (quant/bfl/bfl_layers.h). BFL naming is converted with flux_keys' table; fused weights
// (qkv, linear1) are split and final_layer.adaLN_modulation.1's halves swapped on the quantized rows, with
// their per-row / per-block scales (BFLQuantizedParameter's chunk / cat), so every quantized layer stays a
// Fp8ScaledWeight / Nvfp4Weight. Unquantized tensors are dense, cast to opt.dtype (float32 when unset).
#pragma once

#include <memory>
#include <string>

#include "models/flux/flux_transformer.h"
#include "modules/state_dict.h"

namespace diffq::models::flux {

std::unique_ptr<FluxTransformer2DModel> load_flux_bfl_quantized(const StateDict& sd, const std::string& file,
                                                                const FluxTransformerConfig& base,
                                                                const LoadOptions& opt);

}  // namespace diffq::models::flux
