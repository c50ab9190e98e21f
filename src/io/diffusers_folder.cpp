#include "io/diffusers_folder.h"

#include <algorithm>
#include <fstream>
#include <regex>
#include <set>

#include "diffq/error.h"
#include "io/sharded_safetensors.h"
#include "io/torch_checkpoint.h"

namespace diffq::io {

namespace fs = std::filesystem;

namespace {
constexpr const char* kCtx = "diffusers";
// Weight file stems per format, in Diffusers' order of preference: safetensors (diffusers models, then
// transformers models), then PyTorch pickles (torch.save zip checkpoints).
struct Format {
  const char* ext;
  std::vector<const char*> stems;
};
const Format kFormats[] = {{".safetensors", {"diffusion_pytorch_model", "model"}},
                           {".bin", {"diffusion_pytorch_model", "pytorch_model"}}};

std::string variant_label(std::string_view v) { return v.empty() ? "default" : std::string(v); }

std::string list_variants(const std::vector<std::string>& vs) {
  if (vs.empty()) return "none";
  std::string s;
  for (const auto& v : vs) s += (s.empty() ? "" : ", ") + variant_label(v);
  return s;
}

struct Found {
  std::optional<fs::path> single, index;
};

// Scans `dir` once: for each variant, the single file and/or index of the first format and stem that
// has one.
std::map<std::string, Found> scan(const fs::path& dir) {
  std::map<std::string, Found> out;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  static const std::regex shard(R"(.*-\d{5}-of-\d{5})");
  for (const Format& fmt : kFormats) {
    const std::string ext = fmt.ext, idx = ext + ".index.";
    for (const char* stem : fmt.stems) {
      std::map<std::string, Found> mine;
      const std::string b = stem;
      for (const auto& de : fs::directory_iterator(dir, ec)) {
        if (!de.is_regular_file(ec)) continue;
        const std::string f = de.path().filename().string();
        if (f == b + ext) {
          mine[""].single = de.path();
        } else if (f == b + idx + "json") {
          mine[""].index = de.path();
        } else if (f.starts_with(b + idx) && f.ends_with(".json")) {
          const std::string v = f.substr(b.size() + idx.size(), f.size() - b.size() - idx.size() - 5);
          if (!v.empty() && v.find('.') == std::string::npos) mine[v].index = de.path();
        } else if (f.starts_with(b + ".") && f.ends_with(ext)) {
          const std::string v = f.substr(b.size() + 1, f.size() - b.size() - 1 - ext.size());
          if (!v.empty() && v.find('.') == std::string::npos && !std::regex_match(v, shard))
            mine[v].single = de.path();
        }
      }
      for (auto& [v, found] : mine)
        if (!out.count(v)) out[v] = found;
    }
  }
  return out;
}

bool is_bin(const fs::path& p) { return is_torch_checkpoint_name(p); }

// A sharded PyTorch checkpoint: every shard's tensors, each key of the weight map found in its shard.
TorchCheckpoint load_sharded_bin(const fs::path& index) {
  const ShardedSafetensors map = ShardedSafetensors::open(index);  // the index format is shared
  TorchCheckpoint all;
  for (const std::string& f : map.shard_files()) {
    TorchCheckpoint c = load_torch_checkpoint(index.parent_path() / f);
    for (const std::string& k : c.keys)
      check(map.weight_map().count(k) && map.shard_of(k) == f, kCtx, index.filename().string(), ": shard ", f,
            " holds '", k, "', which the weight_map does not assign to it");
    for (auto& [k, t] : c.tensors) all.tensors[k] = std::move(t);
    for (auto& [k, v] : c.metadata) all.metadata[k] = std::move(v);
    all.keys.insert(all.keys.end(), c.keys.begin(), c.keys.end());
  }
  check(all.keys.size() == map.weight_map().size(), kCtx, index.filename().string(), " maps ",
        map.weight_map().size(), " tensors but its shards hold ", all.keys.size());
  return all;
}

TorchCheckpoint load_bin_files(const WeightFiles& files) {
  if (files.index) return load_sharded_bin(*files.index);
  check(files.files.size() == 1, kCtx, "expected one weight file, got ", files.files.size());
  return load_torch_checkpoint(files.files[0]);
}
}  // namespace

const nlohmann::json* Component::quantization_config() const {
  const auto& j = config.json();
  if (!j.is_object()) return nullptr;
  const auto it = j.find("quantization_config");
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

std::vector<std::string> find_weight_variants(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& [v, f] : scan(dir)) out.push_back(v);
  return out;  // std::map order: "" first, then sorted
}

WeightFiles find_weight_files(const fs::path& dir, std::string_view variant) {
  const auto found = scan(dir);
  const auto it = found.find(std::string(variant));
  if (it == found.end()) {
    std::vector<std::string> vs;
    for (const auto& [v, f] : found) vs.push_back(v);
    fail(kCtx, "no weights (safetensors or .bin) for variant '", variant_label(variant), "' in ",
         dir.string(), "; variants present: ", list_variants(vs));
  }
  WeightFiles w;
  w.variant = std::string(variant);
  // Like Diffusers: a sharded index wins over a single file.
  if (it->second.index) {
    w.index = *it->second.index;
    const ShardedSafetensors s = ShardedSafetensors::open(*w.index);
    for (const auto& f : s.shard_files()) w.files.push_back(dir / f);
  } else {
    w.files.push_back(*it->second.single);
  }
  return w;
}

StateDict load_weight_files(const WeightFiles& files) {
  if (!files.files.empty() && is_bin(files.files[0])) return load_bin_files(files).tensors;
  if (files.index) return ShardedSafetensors::open(*files.index).tensors();
  check(files.files.size() == 1, kCtx, "expected one weight file, got ", files.files.size());
  return SafetensorsFile::open(files.files[0]).tensors();
}

Metadata load_weight_metadata(const WeightFiles& files) {
  if (!files.files.empty() && is_bin(files.files[0])) return load_bin_files(files).metadata;
  Metadata md;
  for (const auto& file : files.files) {
    const SafetensorsFile st = SafetensorsFile::open(file);
    for (const auto& [k, v] : st.metadata()) md[k] = v;
  }
  return md;
}

DiffusersFolder DiffusersFolder::open(const fs::path& root) {
  std::error_code ec;
  check(fs::is_directory(root, ec), kCtx, root.string(), " is not a folder");
  const fs::path index_path = root / "model_index.json";
  check(fs::is_regular_file(index_path, ec), kCtx, "no model_index.json in ", root.string(),
        " (not a Diffusers pipeline folder)");
  DiffusersFolder d;
  d.root_ = root;
  d.model_index_ = JsonConfig(read_json_file(index_path, kCtx), "model_index.json");
  const nlohmann::json& j = d.model_index_.json();
  check(j.is_object(), kCtx, index_path.string(), " is not a JSON object");
  d.pipeline_class_ = d.model_index_.require<std::string>("_class_name");
  d.diffusers_version_ = d.model_index_.get<std::string>("_diffusers_version", "");

  // nlohmann::json objects iterate by key; keep the file's order for components via a second parse.
  std::ifstream in(index_path, std::ios::binary);
  const nlohmann::ordered_json ordered = nlohmann::ordered_json::parse(in);
  for (const auto& [key, value] : ordered.items()) {
    if (key.starts_with("_")) continue;
    const bool pair = value.is_array() && value.size() == 2;
    if (pair && value[0].is_null() && value[1].is_null()) {
      d.skipped_.push_back(key);
      continue;
    }
    if (!pair || !value[0].is_string() || !value[1].is_string()) {
      d.settings_[key] = nlohmann::json::parse(value.dump());
      continue;
    }
    Component c;
    c.name = key;
    c.library = value[0].get<std::string>();
    c.class_name = value[1].get<std::string>();
    c.dir = root / key;
    check(fs::is_directory(c.dir, ec), kCtx, "component '", key, "' (", c.library, ".",
          c.class_name, ") listed in model_index.json has no folder ", c.dir.string());
    for (const char* cfg : {"config.json", "scheduler_config.json"}) {
      if (fs::is_regular_file(c.dir / cfg, ec)) {
        c.config_path = c.dir / cfg;
        c.config = JsonConfig(read_json_file(c.config_path, kCtx), key + "/" + cfg);
        check(c.config.json().is_object(), kCtx, c.config_path.string(), " is not a JSON object");
        break;
      }
    }
    c.variants = find_weight_variants(c.dir);
    d.components_.push_back(std::move(c));
  }
  return d;
}

bool DiffusersFolder::has_component(std::string_view name) const {
  return std::any_of(components_.begin(), components_.end(),
                     [&](const Component& c) { return c.name == name; });
}

const Component& DiffusersFolder::component(std::string_view name) const {
  for (const auto& c : components_)
    if (c.name == name) return c;
  std::string names;
  for (const auto& c : components_) names += (names.empty() ? "" : ", ") + c.name;
  fail(kCtx, "pipeline ", root_.string(), " (", pipeline_class_, ") has no component '", name,
       "'; components: ", names);
}

WeightFiles DiffusersFolder::weight_files(std::string_view name, std::string_view variant) const {
  const Component& c = component(name);
  check(c.has_weights() || !variant.empty(), kCtx, "component '", name, "' (", c.class_name,
        ") has no weights in ", c.dir.string());
  return find_weight_files(c.dir, variant);
}

StateDict DiffusersFolder::load_state_dict(std::string_view name, std::string_view variant) const {
  return load_weight_files(weight_files(name, variant));
}

}  // namespace diffq::io
