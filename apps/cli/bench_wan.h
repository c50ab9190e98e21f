// diffq bench's Wan worker (bench_wan.cpp): builtin:wan-* models and WanPipeline folders.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "bench_common.h"

namespace diffq::cli {

// builtin:wan-* or a folder whose model_index.json names WanPipeline.
bool is_wan_model(const std::string& model);
// One combination in this process: load, warm up, time `repeat` generations; the JSON row.
nlohmann::json run_wan_worker(BenchArgs a);

}  // namespace diffq::cli
