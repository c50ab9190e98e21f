// What `--compile` (and `--autotune`) did to the transformer, for generate's and bench's reports.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "compile/compile_options.h"
#include "diffq/pipeline.h"
#include "models/flux/flux_transformer.h"

namespace diffq::cli {

// The options of --compile [--autotune]: max-autotune when autotune (its cache file: DIFFQ_AUTOTUNE_CACHE,
// else $XDG_CACHE_HOME/diffq/autotune.json, else ~/.cache/diffq/autotune.json).
compile::CompileOptions cli_compile_options(bool autotune);

// {"graphs", "cache_hits", "eager_fallbacks", "compile_s", "opaque_nodes", "quantized_gemm_nodes",
// "autotune": {"nodes", "tuned", "candidates", "cache_hits", "non_default", "seconds", "cache_file"}
// (null without --autotune)}; null when not compiled.
nlohmann::json compile_report(const DiffusionPipeline::CompileReport& r);
nlohmann::json compile_report(const models::flux::FluxTransformer2DModel& t, bool autotune);
// The same for any transformer's compiled modules (e.g. WanTransformer3DModel::compiled_modules()).
nlohmann::json compile_report(const std::vector<const compile::CompiledModule*>& mods, bool autotune);
// One line for stderr ("compile: 2 graphs in 0.12 s; autotune: ...").
std::string compile_report_line(const nlohmann::json& report);

}  // namespace diffq::cli
