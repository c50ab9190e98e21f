// The CLI's quantization flags -> PipelineOptions::quantization_config_json (shared by generate and quantize),
// through the public diffq/quantization.h.
#pragma once

#include <string>

#include "diffq/dtype.h"

namespace diffq::cli {

// --quant <shorthand> [--quantize a,b] or --quant-config <file.json> (not both); "" when neither.
// `dtype` is the compute dtype given to the backends' compute-dtype kwargs.
std::string cli_quantization_config(const std::string& quant, const std::string& quant_config_file,
                                    const std::string& components, DType dtype);

}  // namespace diffq::cli
