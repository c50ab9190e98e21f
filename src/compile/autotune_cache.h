// The autotune cache file: max-autotune's chosen kernel tunings, kept between processes so that a
// second run times nothing. JSON:
//   {"format": "diffq-autotune", "version": 1,
//    "processors": {"<processor key>": {"<node key>": <tuning>, ...}, ...}}
// The processor key and the tunings are the device's (CompileBackend::processor_key / tuning_to_json;
// on the CPU: the CPU model, Highway's dispatched SIMD target and the thread count, and
// {"gemm_split": "rows", "gemm_parts_per_thread": 2, "attn_bq": 128, "attn_bk": 2048});
// the node key names the op, its attributes and its operands' shapes, strides and dtypes (autotune.cpp).
// Saving merges into what the file holds (other processors' entries are kept) and replaces it atomically.
#pragma once

#include <filesystem>
#include <map>
#include <string>

#include "compile/kernel_tuning.h"

namespace diffq::compile {

class CompileBackend;

using TuningTable = std::map<std::string, KernelTuning>;  // node key -> choice

// `configured` when not empty, else DIFFQ_AUTOTUNE_CACHE, else $XDG_CACHE_HOME/diffq/autotune.json,
// else $HOME/.cache/diffq/autotune.json. Error when none of these is set.
std::filesystem::path autotune_cache_path(const std::string& configured);

// The entries of `processor` in `file` (empty when the file does not exist). The whole file is
// validated (its entries by `device`): malformed JSON, a wrong layout or an unknown field or value is
// an Error naming the file and the entry.
TuningTable load_autotune_cache(const std::filesystem::path& file, const std::string& processor,
                                const CompileBackend& device);

// Adds `entries` to the section of `processor` in `file` (created with its folder when missing; the
// file's other entries are kept) by writing a temporary file next to it and renaming it over.
void save_autotune_cache(const std::filesystem::path& file, const std::string& processor, const TuningTable& entries,
                         const CompileBackend& device);

}  // namespace diffq::compile
