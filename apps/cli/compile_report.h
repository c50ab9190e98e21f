// What `--compile` (and `--autotune`) did to the transformer, for generate's and bench's reports.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "diffq/pipeline.h"

namespace diffq::cli {

// {"graphs", "cache_hits", "eager_fallbacks", "compile_s", "opaque_nodes", "quantized_gemm_nodes",
// "autotune": {"nodes", "tuned", "candidates", "cache_hits", "non_default", "seconds", "cache_file"}
// (null without --autotune), "declined": {"passes", "why"} (null unless passes declined on the device:
// one without a compile backend)}; null when not compiled.
nlohmann::json compile_report(const DiffusionPipeline::CompileReport& r);
// One line for stderr ("compile: 2 graphs in 0.12 s; autotune: ...").
std::string compile_report_line(const nlohmann::json& report);

}  // namespace diffq::cli
