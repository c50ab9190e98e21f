// torchao configs as their JSON (`{"_type", "_version": 2, "_data"}`) for the CUDA tests: a granularity
// (PerRow / PerTensor) for the weight, or for activations and weight alike (the dynamic configs' pair).
#pragma once

#include <nlohmann/json.hpp>

#include "quant/torchao/torchao.h"

namespace diffq::cudatest {

inline quant::torchao::Config torchao_config(const char* type, const char* granularity, bool pair) {
  const nlohmann::json g = {{"_type", granularity}, {"_version", 2}, {"_data", nlohmann::json::object()}};
  const nlohmann::json data = {{"granularity", pair ? nlohmann::json::array({g, g}) : g}};
  return quant::torchao::Config::from_json({{"_type", type}, {"_version", 2}, {"_data", data}});
}

}  // namespace diffq::cudatest
