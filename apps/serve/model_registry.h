// The pipelines a server offers, by name: loaded once, kept loaded, loaded on demand and evicted least
// recently used when the next one would not fit under the memory budget (--max-memory). The size of a
// pipeline is the bytes of its weight files (what loading it maps or copies).
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "diffq/pipeline.h"

namespace diffq::serve {

struct LoadOptions {
  std::string dtype = "float32";
  std::string quantization_config_json;  // PipelineQuantizationConfig (the CLI builds it from --quant ...)
  std::string offload;          // as DiffusionPipeline::enable_offload
  std::string compile;          // "" | full | regional
  std::string device = "cpu";   // PipelineOptions::device: cpu | cuda | cuda:N
};

struct ModelEntry {
  std::string name;
  std::filesystem::path folder;
  std::string kind;             // image | video
  std::string pipeline_class;
  int64_t bytes = 0;            // weight files on disk
  std::shared_ptr<DiffusionPipeline> pipe;  // null while not loaded
  nlohmann::json defaults;      // from pipe->defaults() once loaded
  std::chrono::steady_clock::time_point last_used{};
  int64_t loads = 0;
};

class ModelRegistry {
 public:
  // `budget_bytes` 0: no limit. Every model is loaded at construction while it fits (none without
  // `preload`: an API process that only enqueues for workers reads the folders' pipeline classes only).
  ModelRegistry(std::vector<std::pair<std::string, std::filesystem::path>> models, LoadOptions opt,
                int64_t budget_bytes, bool preload = true);
  // The loaded pipeline of `name` ("" = the first), loading it (and evicting others) when needed.
  // Throws RequestError 404 for an unknown name. Only the job worker calls this (one at a time).
  std::shared_ptr<DiffusionPipeline> acquire(const std::string& name);
  // "" -> the first model's name; throws RequestError 404 (field "model") when unknown.
  std::string resolve(const std::string& name) const;
  std::string kind_of(const std::string& name) const;
  nlohmann::json list() const;  // GET /v1/models' data
  // The names offered (fixed at construction, so read without waiting on a load).
  std::vector<std::string> names() const;
  int64_t loaded_bytes() const;

 private:
  void load(ModelEntry& e);  // with mu_ held
  std::vector<ModelEntry> entries_;
  LoadOptions opt_;
  int64_t budget_;
  mutable std::mutex mu_;
};

// "2GiB", "512MiB", "1.5G", "1000000" -> bytes (throws naming the text).
int64_t parse_size(const std::string& text);

}  // namespace diffq::serve
