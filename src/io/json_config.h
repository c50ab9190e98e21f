// Typed, strict access to a checkpoint's JSON config (config.json, scheduler_config.json,
// model_index.json). Missing or null keys take the caller's default (as Diffusers does); a present key
// of the wrong type is an error naming the file, the key and the value.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace diffq::io {

class JsonConfig {
 public:
  JsonConfig() = default;
  JsonConfig(nlohmann::json j, std::string source) : j_(std::move(j)), source_(std::move(source)) {}

  const nlohmann::json& json() const { return j_; }
  const std::string& source() const { return source_; }  // e.g. "transformer/config.json"
  bool has(std::string_view key) const;                  // present and not null

  // T: bool, int, int64_t, double, float, std::string, std::vector<int64_t|double|std::string>.
  template <class T>
  T get(std::string_view key, const T& fallback) const {
    return has(key) ? convert<T>(key) : fallback;
  }
  template <class T>
  T require(std::string_view key) const;

 private:
  template <class T>
  T convert(std::string_view key) const;
  nlohmann::json j_ = nlohmann::json::object();
  std::string source_;
};

// Reads a JSON file with a clear error on I/O or syntax problems ("[<ctx>] <file>: ...").
nlohmann::json read_json_file(const std::filesystem::path& path, const char* ctx);
// A JSON object file as a JsonConfig (its path as the source); errors name the file.
JsonConfig read_json_config(const std::filesystem::path& path, const char* ctx);

}  // namespace diffq::io
