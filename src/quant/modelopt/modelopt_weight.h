// Reads one Linear layer of a ModelOpt export from a state dict: `<m>.weight` in the algorithm's packed
// dtype, `<m>.weight_scale` (+ `weight_scale_2` for NVFP4), and the optional `<m>.input_scale` and
// `<m>.pre_quant_scale`. Errors name the key and what was expected.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "modules/state_dict.h"
#include "quant/bfl/scaled_weight.h"
#include "quant/modelopt/modelopt_config.h"

namespace diffq::quant {

// Null when `<module>.weight_scale` is absent and the weight is a float tensor (a layer left unquantized).
// `shape` is the model's [out_features, in_features]; `consumed` gets every key read.
std::shared_ptr<ScaledWeight> load_modelopt_weight(const StateDict& sd, const std::string& module, const Shape& shape,
                                                   ModelOptAlgo algo, const std::string& source,
                                                   std::vector<std::string>& consumed);

}  // namespace diffq::quant
