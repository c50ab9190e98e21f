// The CLI's quantization flags -> PipelineQuantizationConfig (shared by generate, bench, quantize).
#pragma once

#include <optional>
#include <string>

#include "pipelines/pipeline_quantization_config.h"

namespace diffq::cli {

// --quant <shorthand> [--quantize a,b] or --quant-config <file.json> (not both); nullopt when neither.
// `dtype` is the compute dtype name given to the backends' compute-dtype kwargs.
std::optional<PipelineQuantizationConfig> cli_quantization_config(const std::string& quant,
                                                                  const std::string& quant_config_file,
                                                                  const std::string& components,
                                                                  const std::string& dtype);

}  // namespace diffq::cli
