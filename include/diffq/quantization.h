// Quantization configs for PipelineOptions::quantization_config_json, made from the CLI's scheme
// shorthands (`diffq generate --quant nf4`) or read from a JSON file (`--quant-config q.json`).
//
//   diffq::PipelineOptions o{.dtype = diffq::DType::bf16};
//   o.quantization_config_json = diffq::quantization_config_from_shorthand("nf4", diffq::DType::bf16, {"transformer"});
//   auto pipe = diffq::DiffusionPipeline::from_pretrained(folder, o);
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "diffq/dtype.h"

namespace diffq {

// The scheme shorthands: nf4 | fp4 | int8 (bitsandbytes), int8wo | int4wo | int8dq | fp8wo | fp8dq (torchao),
// quanto-int8 | quanto-int4 | quanto-int2 | quanto-fp8, q8_0 | q4_0 | q4_K | q6_K ... (GGUF types).
const std::vector<std::string>& quant_shorthands();

// Diffusers' PipelineQuantizationConfig (global mode) as JSON for `shorthand`: {"quant_backend", "quant_kwargs",
// "components_to_quantize"}. `dtype` is the compute dtype given to the backend's compute-dtype kwargs;
// `components` empty = every model component, as Diffusers. Throws diffq::Error for an unknown shorthand.
std::string quantization_config_from_shorthand(const std::string& shorthand, DType dtype,
                                               const std::vector<std::string>& components = {});

// A PipelineQuantizationConfig JSON file, validated (Diffusers' rules, errors naming the file), as JSON text.
std::string quantization_config_from_file(const std::filesystem::path& file);

}  // namespace diffq
