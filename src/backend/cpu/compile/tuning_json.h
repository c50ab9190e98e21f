// The CPU's tunings as autotune cache entries (compile/autotune_cache.h) and its processor key:
//   {"gemm_split": "rows", "gemm_parts_per_thread": 2, "attn_bq": 128, "attn_bk": 2048}
// under "<model name from /proc/cpuinfo> | <Highway target> | <N> threads", so that another machine,
// SIMD level or --threads tunes again.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>

#include "backend/cpu/tuning.h"

namespace diffq::backend::cpu {

nlohmann::json tuning_to_json(const Tuning& t);
// Every field checked: an unknown field or value is an Error naming `where` (the entry).
Tuning tuning_from_json(const nlohmann::json& j, const std::string& where);
std::string_view gemm_split_name(GemmSplit s);

std::string processor_key();

}  // namespace diffq::backend::cpu
