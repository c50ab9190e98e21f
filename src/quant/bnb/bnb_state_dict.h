// Whole state dicts in bitsandbytes form: what Diffusers' from_pretrained(quantization_config=
// BitsAndBytesConfig(...)) followed by save_pretrained writes, and reading such a file back into
// QuantizedWeights.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "quant/bnb/bnb_config.h"
#include "quant/quantized_weight.h"

namespace diffq::quant {

struct BnbQuantizeOptions {
  DType torch_dtype = DType::f16;  // Diffusers' default torch_dtype with bitsandbytes
  // Whether "<module>.weight" belongs to an nn.Linear (only those are quantized). Default: 2-D weights.
  std::function<bool(const std::string& module, const Tensor& weight)> is_linear;
  std::vector<std::string> keep_in_fp32;  // the model's _keep_in_fp32_modules (kept float32, never quantized)
  int sum_lanes = 0;                      // see Bnb4bitOptions::sum_lanes
};

// The tensors save_pretrained writes for a quantized copy of the dense `sd`: every Linear weight the
// config quantizes replaced by its bitsandbytes tensors, every other floating tensor cast to
// torch_dtype (float32 for keep_in_fp32 modules), integer tensors unchanged.
io::NamedTensors bnb_quantize_state_dict(const io::StateDict& sd, const BitsAndBytesConfig& cfg,
                                         const BnbQuantizeOptions& opt = {});

// Every bitsandbytes Linear weight of a saved state dict, by weight key ("<module>.weight"): 4-bit
// weights are found by their quant_state blob, 8-bit ones by "<module>.SCB". compute dtype and
// threshold come from the config.
std::map<std::string, std::shared_ptr<QuantizedWeight>> bnb_load_state_dict(const io::StateDict& sd,
                                                                            const BitsAndBytesConfig& cfg);

}  // namespace diffq::quant
