// SDNQ behind QuantMethod: quantize-on-load (Diffusers' SDNQConfig kwargs) and pre-quantized
// save_pretrained folders (quant_method "sdnq"), and the `--quant sdnq-<dtype>` shorthands.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "quant/quant_method.h"

namespace diffq::quant::sdnq {

std::unique_ptr<QuantMethod> make_sdnq_method(const nlohmann::json& config, bool pre_quantized);
// "sdnq-int8" -> {"sdnq", {"weights_dtype": "int8"}}; "sdnq-fp8" is float8_e4m3fn. Throws naming the value.
std::pair<std::string, nlohmann::json> sdnq_shorthand(const std::string& name);

}  // namespace diffq::quant::sdnq
