// The autotune cache file: max-autotune's chosen kernel tunings, kept between processes so that a
// second run times nothing. JSON:
//   {"format": "diffq-autotune", "version": 1,
//    "processors": {"<processor key>": {"<node key>": {"gemm_split": "rows", "gemm_parts_per_thread": 2,
//                                                      "attn_bq": 128, "attn_bk": 2048}, ...}, ...}}
// The processor key names the CPU model, Highway's dispatched SIMD target and the thread count; the
// node key the op, its attributes and its operands' shapes, strides and dtypes (autotune.cpp). Saving
// merges into what the file holds (other processors' entries are kept) and replaces it atomically.
#pragma once

#include <filesystem>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "backend/cpu/tuning.h"

namespace diffq::compile {

using TuningTable = std::map<std::string, backend::cpu::Tuning>;  // node key -> choice

// "<model name from /proc/cpuinfo> | <Highway target> | <N> threads".
std::string processor_key();

// `configured` when not empty, else DIFFQ_AUTOTUNE_CACHE, else $XDG_CACHE_HOME/diffq/autotune.json,
// else $HOME/.cache/diffq/autotune.json. Error when none of these is set.
std::filesystem::path autotune_cache_path(const std::string& configured);

// The entries of `processor` in `file` (empty when the file does not exist). The whole file is
// validated: malformed JSON, a wrong layout or an unknown field or value is an Error naming the file
// and the entry.
TuningTable load_autotune_cache(const std::filesystem::path& file, const std::string& processor);

// Adds `entries` to the section of `processor` in `file` (created with its folder when missing; the
// file's other entries are kept) by writing a temporary file next to it and renaming it over.
void save_autotune_cache(const std::filesystem::path& file, const std::string& processor, const TuningTable& entries);

nlohmann::json tuning_to_json(const backend::cpu::Tuning& t);
// `where` names the entry in messages.
backend::cpu::Tuning tuning_from_json(const nlohmann::json& j, const std::string& where);
std::string_view gemm_split_name(backend::cpu::GemmSplit s);

}  // namespace diffq::compile
