#include "compile/autotune_cache.h"

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

#include "compile/compile_backend.h"
#include "diffq/error.h"
#include "io/atomic_file.h"

namespace diffq::compile {

using nlohmann::json;

namespace {

constexpr const char* kFormat = "diffq-autotune";
constexpr int kVersion = 1;

// The whole file, its entries validated by `device`; an empty document when the file does not exist.
json read_file(const std::filesystem::path& file, const CompileBackend& device) {
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
      device.tuning_from_json(t, where + ", processor \"" + proc + "\", node \"" + key + "\"");
  }
  return j;
}

}  // namespace

std::filesystem::path autotune_cache_path(const std::string& configured) {
  if (!configured.empty()) return configured;
  if (const char* v = std::getenv("DIFFQ_AUTOTUNE_CACHE"); v && *v) return v;
  if (const char* v = std::getenv("XDG_CACHE_HOME"); v && *v) return std::filesystem::path(v) / "diffq" / "autotune.json";
  if (const char* v = std::getenv("HOME"); v && *v) return std::filesystem::path(v) / ".cache" / "diffq" / "autotune.json";
  fail("autotune", "no place for the autotune cache: set DIFFQ_AUTOTUNE_CACHE (or XDG_CACHE_HOME or HOME)");
}

TuningTable load_autotune_cache(const std::filesystem::path& file, const std::string& processor,
                                const CompileBackend& device) {
  const json j = read_file(file, device);
  TuningTable out;
  const json& procs = j["processors"];
  if (auto it = procs.find(processor); it != procs.end())
    for (const auto& [key, t] : it->items()) out[key] = device.tuning_from_json(t, file.string());
  return out;
}

void save_autotune_cache(const std::filesystem::path& file, const std::string& processor, const TuningTable& entries,
                         const CompileBackend& device) {
  json j = read_file(file, device);  // merge: what other runs and processors wrote meanwhile is kept
  json& mine = j["processors"][processor];
  if (!mine.is_object()) mine = json::object();
  for (const auto& [key, t] : entries) mine[key] = device.tuning_to_json(t);

  std::error_code ec;
  if (file.has_parent_path()) std::filesystem::create_directories(file.parent_path(), ec);
  check(!ec, "autotune", "cannot create the folder of the autotune cache ", file.string(), ": ", ec.message());
  const std::string text = j.dump(1) + "\n";
  io::write_file_atomically(file, "autotune", [&](const io::ByteSink& sink) { sink(text.data(), text.size()); });
}

}  // namespace diffq::compile
