#include "io/sharded_safetensors.h"

#include <fstream>
#include <set>
#include <sstream>

#include "diffq/error.h"

namespace diffq::io {

namespace {
constexpr const char* kCtx = "safetensors";
}

ShardedSafetensors ShardedSafetensors::open(const std::filesystem::path& index_json) {
  check(std::filesystem::is_regular_file(index_json), kCtx, "index file ", index_json.string(),
        " does not exist");
  const nlohmann::json j = read_json_file(index_json, kCtx);
  const std::string file = index_json.filename().string();
  check(j.is_object(), kCtx, file, " is not a JSON object");
  ShardedSafetensors s;
  s.index_path_ = index_json;
  if (const auto m = j.find("metadata"); m != j.end() && !m->is_null()) {
    check(m->is_object(), kCtx, "\"metadata\" of ", file, " is not an object");
    s.metadata_ = *m;
  }
  const auto wm = j.find("weight_map");
  check(wm != j.end() && wm->is_object(), kCtx, file, " has no \"weight_map\" object");
  const std::filesystem::path dir = index_json.parent_path();
  std::set<std::string> checked;
  for (const auto& [name, shard] : wm->items()) {
    check(shard.is_string(), kCtx, "weight_map of ", file, " maps '", name,
          "' to a non-string: ", shard.dump().substr(0, 80));
    const std::string f = shard.get<std::string>();
    check(!f.empty() && f.find('/') == std::string::npos && f != "." && f != "..", kCtx,
          "weight_map of ", file, " maps '", name, "' to '", f, "', which is not a file name");
    if (checked.insert(f).second)
      check(std::filesystem::is_regular_file(dir / f), kCtx, "weight_map of ", index_json.string(),
            " points to the missing shard ", f, " (for tensor '", name, "')");
    s.weight_map_.emplace(name, f);
  }
  return s;
}

std::optional<uint64_t> ShardedSafetensors::total_size() const {
  const auto t = metadata_.find("total_size");
  if (t == metadata_.end() || !t->is_number_unsigned()) return std::nullopt;
  return t->get<uint64_t>();
}

std::vector<std::string> ShardedSafetensors::shard_files() const {
  std::set<std::string> s;
  for (const auto& [n, f] : weight_map_) s.insert(f);
  return {s.begin(), s.end()};
}

const std::string& ShardedSafetensors::shard_of(std::string_view tensor) const {
  const auto it = weight_map_.find(std::string(tensor));
  check(it != weight_map_.end(), kCtx, "no tensor '", tensor, "' in the weight_map of ",
        index_path_.string());
  return it->second;
}

const SafetensorsFile& ShardedSafetensors::shard(const std::string& file) const {
  std::lock_guard<std::mutex> lock(cache_->mu);
  auto& slot = cache_->open[file];
  if (!slot) slot = std::make_unique<SafetensorsFile>(SafetensorsFile::open(index_path_.parent_path() / file));
  return *slot;
}

Tensor ShardedSafetensors::tensor(std::string_view name) const {
  const std::string& f = shard_of(name);
  const SafetensorsFile& sf = shard(f);
  check(sf.contains(name), kCtx, "tensor '", name, "' is mapped to shard ", f, " by ",
        index_path_.filename().string(), " but that shard does not contain it");
  return sf.tensor(name);
}

StateDict ShardedSafetensors::tensors() const {
  StateDict out;
  for (const auto& [name, f] : weight_map_) out.emplace(name, tensor(name));
  return out;
}

StateDict load_safetensors(const std::filesystem::path& path) {
  const std::string n = path.filename().string();
  if (n.size() > 5 && n.ends_with(".json")) return ShardedSafetensors::open(path).tensors();
  return SafetensorsFile::open(path).tensors();
}

}  // namespace diffq::io
