// Sharded safetensors checkpoints: `<name>.safetensors.index.json` = {"metadata": {"total_size": N,
// ...}, "weight_map": {tensor: shard file}} next to the shard files. Shards are opened (mmapped) on
// first use; tensors borrow their shard's mapping like SafetensorsFile::tensor.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>

#include "io/json_config.h"
#include <optional>
#include <string>

#include "io/safetensors.h"

namespace diffq::io {

class ShardedSafetensors {
 public:
  // Reads and checks the index (JSON shape, and that every shard it names exists next to it).
  static ShardedSafetensors open(const std::filesystem::path& index_json);

  const std::filesystem::path& index_path() const { return index_path_; }
  const nlohmann::json& metadata() const { return metadata_; }  // the index's "metadata" ({} if none)
  std::optional<uint64_t> total_size() const;                   // metadata.total_size
  const std::map<std::string, std::string>& weight_map() const { return weight_map_; }
  std::vector<std::string> shard_files() const;  // distinct, sorted
  const std::string& shard_of(std::string_view tensor) const;

  const SafetensorsFile& shard(const std::string& file) const;  // opened lazily, then cached
  Tensor tensor(std::string_view name) const;
  // Every tensor of the weight map (each must be present in the shard the map names).
  StateDict tensors() const;

 private:
  struct Cache {
    std::mutex mu;
    std::map<std::string, std::unique_ptr<SafetensorsFile>> open;
  };
  std::filesystem::path index_path_;
  nlohmann::json metadata_ = nlohmann::json::object();
  std::map<std::string, std::string> weight_map_;
  std::shared_ptr<Cache> cache_ = std::make_shared<Cache>();
};

// Loads a checkpoint given either a .safetensors file or a *.safetensors.index.json (zero-copy).
StateDict load_safetensors(const std::filesystem::path& path);


}  // namespace diffq::io
