// diffq bench's step-cache combinations ("bf16+fbc:0.1", "bf16+nf4+magcache", "bf16+teacache:0.4+compile"):
// the token, and what a worker reports of its cache (include/diffq/cache.h's CacheReport) in --json and the
// table.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "diffq/cache.h"

namespace diffq::cli {

// A combination token naming a step cache: fbc[:T] | taylorseer[:...] | magcache[:...] | teacache[:T], the same
// spec as `generate --cache`. nullopt when `tok` names no cache; throws naming the combination when it does
// but the spec is wrong.
std::optional<CacheOptions> cache_token(const std::string& combo, const std::string& tok);

// The row's "cache" object: {"method", "computed", "skipped", "skipped_range", "always_run", "per_range":
// [{"blocks", "computed", "skipped"}], "calls": [{"model", "context", "decisions": "CCSCS"}], "note"?}, of
// the last timed generation (C: the call computed the skippable blocks, S: skipped them).
nlohmann::json cache_json(const CacheReport& r);

// Table helpers: "6 / 2" for a row with a cache ("-" without), and the notes saying which blocks each
// method skips (one line per method).
std::string cache_cell(const nlohmann::json& row);
std::vector<std::string> cache_notes(const std::vector<nlohmann::json>& rows);

}  // namespace diffq::cli
