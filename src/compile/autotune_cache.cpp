#include "compile/autotune_cache.h"


#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "backend/cpu/cpu_features.h"
#include "backend/cpu/simd_targets.h"

#include "diffq/error.h"
#include "io/atomic_file.h"
#include "diffq/runtime.h"

namespace diffq::compile {

using backend::cpu::GemmSplit;
using backend::cpu::Tuning;
using nlohmann::json;

namespace {

constexpr const char* kFormat = "diffq-autotune";
constexpr int kVersion = 1;

// The whole file, validated; an empty document when the file does not exist.
json read_file(const std::filesystem::path& file) {
  std::error_code ec;
  if (!std::filesystem::exists(file, ec))
    return json{{"format", kFormat}, {"version", kVersion}, {"processors", json::object()}};
  std::ifstream in(file, std::ios::binary);
  check(bool(in), "autotune", "cannot read the autotune cache ", file.string());
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    fail("autotune", "the autotune cache ", file.string(), " is not valid JSON: ", e.what(),
         " (delete the file to re-tune)");
  }
  const std::string where = "the autotune cache " + file.string();
  check(j.is_object(), "autotune", where, " must hold a JSON object");
  check(j.value("format", std::string()) == kFormat, "autotune", where, ": \"format\" must be \"", kFormat, "\"");
  check(j.contains("version") && j["version"].is_number_integer() && j["version"].get<int>() == kVersion,
        "autotune", where, ": unsupported \"version\" (expected ", kVersion, ")");
  check(j.contains("processors") && j["processors"].is_object(), "autotune", where,
        ": \"processors\" must be an object");
  for (const auto& [proc, entries] : j["processors"].items()) {
    check(entries.is_object(), "autotune", where, ": processor \"", proc, "\" must map node keys to tunings");
    for (const auto& [key, t] : entries.items())
      tuning_from_json(t, where + ", processor \"" + proc + "\", node \"" + key + "\"");
  }
  return j;
}

}  // namespace

std::string_view gemm_split_name(GemmSplit s) {
  switch (s) {
    case GemmSplit::longer_side: return "longer_side";
    case GemmSplit::rows: return "rows";
    case GemmSplit::cols: return "cols";
    case GemmSplit::none: return "none";
  }
  return "?";
}

json tuning_to_json(const Tuning& t) {
  return json{{"gemm_split", std::string(gemm_split_name(t.gemm_split))},
              {"gemm_parts_per_thread", t.gemm_parts_per_thread},
              {"attn_bq", t.attn_bq},
              {"attn_bk", t.attn_bk}};
}

Tuning tuning_from_json(const json& j, const std::string& where) {
  check(j.is_object(), "autotune", where, ": a tuning must be an object");
  Tuning t;
  auto positive = [&](const std::string& field, const json& v) -> int64_t {
    check(v.is_number_integer() && v.get<int64_t>() > 0, "autotune", where, ": \"", field,
          "\" must be a positive integer, got ", v.dump());
    return v.get<int64_t>();
  };
  for (const auto& [field, v] : j.items()) {
    if (field == "gemm_split") {
      const std::string s = v.is_string() ? v.get<std::string>() : v.dump();
      if (s == "longer_side") t.gemm_split = GemmSplit::longer_side;
      else if (s == "rows") t.gemm_split = GemmSplit::rows;
      else if (s == "cols") t.gemm_split = GemmSplit::cols;
      else if (s == "none") t.gemm_split = GemmSplit::none;
      else fail("autotune", where, ": unknown gemm_split '", s, "' (expected longer_side, rows, cols or none)");
    } else if (field == "gemm_parts_per_thread") {
      const int64_t p = positive(field, v);
      check(p <= 64, "autotune", where, ": \"gemm_parts_per_thread\" must be at most 64, got ", p);
      t.gemm_parts_per_thread = int(p);
    } else if (field == "attn_bq") {
      t.attn_bq = positive(field, v);
    } else if (field == "attn_bk") {
      t.attn_bk = positive(field, v);
    } else {
      fail("autotune", where, ": unknown field '", field,
           "' (expected gemm_split, gemm_parts_per_thread, attn_bq, attn_bk)");
    }
  }
  return t;
}

std::string processor_key() {
  return backend::cpu::cpu_model_name() + " | " + backend::cpu::simd_target_chosen() + " | " + std::to_string(num_threads()) + " threads";
}

std::filesystem::path autotune_cache_path(const std::string& configured) {
  if (!configured.empty()) return configured;
  if (const char* v = std::getenv("DIFFQ_AUTOTUNE_CACHE"); v && *v) return v;
  if (const char* v = std::getenv("XDG_CACHE_HOME"); v && *v) return std::filesystem::path(v) / "diffq" / "autotune.json";
  if (const char* v = std::getenv("HOME"); v && *v) return std::filesystem::path(v) / ".cache" / "diffq" / "autotune.json";
  fail("autotune", "no place for the autotune cache: set DIFFQ_AUTOTUNE_CACHE (or XDG_CACHE_HOME or HOME)");
}

TuningTable load_autotune_cache(const std::filesystem::path& file, const std::string& processor) {
  const json j = read_file(file);
  TuningTable out;
  const json& procs = j["processors"];
  if (auto it = procs.find(processor); it != procs.end())
    for (const auto& [key, t] : it->items()) out[key] = tuning_from_json(t, file.string());
  return out;
}

void save_autotune_cache(const std::filesystem::path& file, const std::string& processor, const TuningTable& entries) {
  json j = read_file(file);  // merge: what other runs and processors wrote meanwhile is kept
  json& mine = j["processors"][processor];
  if (!mine.is_object()) mine = json::object();
  for (const auto& [key, t] : entries) mine[key] = tuning_to_json(t);

  std::error_code ec;
  if (file.has_parent_path()) std::filesystem::create_directories(file.parent_path(), ec);
  check(!ec, "autotune", "cannot create the folder of the autotune cache ", file.string(), ": ", ec.message());
  const std::string text = j.dump(1) + "\n";
  io::write_file_atomically(file, "autotune", [&](const io::ByteSink& sink) { sink(text.data(), text.size()); });
}

}  // namespace diffq::compile
