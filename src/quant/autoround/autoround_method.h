// AutoRound checkpoints behind QuantMethod (Diffusers' AutoRoundConfig; load only, as in Diffusers):
// the saved "quantization_config" (quant_method "auto-round"): bits, group_size, sym, data_type "int",
// packing_format ("auto_round:auto_gptq" and other *gptq* packings store zp - 1; "auto_round" the zero
// point itself; "awq" packings are refused), act_bits >= 16 (weight-only), extra_config per layer
// (bits / group_size overrides; bits >= 16 is a dense layer). Errors name the field and value.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "quant/quant_method.h"

namespace diffq::quant::autoround {

std::unique_ptr<QuantMethod> make_autoround_method(const nlohmann::json& quantization_config, const std::string& source);

}  // namespace diffq::quant::autoround
