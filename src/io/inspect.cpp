#include "io/inspect.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>

#include "diffq/error.h"
#include "io/diffusers_folder.h"
#include "io/gguf.h"
#include "io/mapped_file.h"
#include "io/sharded_safetensors.h"
#include "io/torch_checkpoint.h"

namespace diffq::io {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

namespace {
constexpr const char* kCtx = "inspect";

ojson shape_json(const Shape& s) {
  ojson a = ojson::array();
  for (int64_t d : s) a.push_back(d);
  return a;
}

uint64_t numel_of(const Shape& s) {
  uint64_t n = 1;
  for (int64_t d : s) n *= uint64_t(d);
  return n;
}

// Totals over a set of safetensors files; with `table`, one row per tensor too.
ojson summarize_files(const std::vector<fs::path>& files, bool table,
                      const ShardedSafetensors* index = nullptr) {
  std::map<std::string, uint64_t> dtypes;
  uint64_t count = 0, params = 0, bytes = 0;
  ojson rows = ojson::array();
  ojson metadata = ojson::object();
  for (const fs::path& p : files) {
    if (is_torch_checkpoint_name(p)) {  // a PyTorch .bin: its tensors (torchao subclasses flattened)
      const TorchCheckpoint c = load_torch_checkpoint(p);
      if (files.size() == 1)
        for (const auto& [k, v] : c.metadata) metadata[k] = v;
      for (const auto& [name, t] : c.tensors) {
        const std::string dt(safetensors_dtype_name(t.dtype()));
        ++count;
        ++dtypes[dt];
        params += numel_of(t.shape());
        bytes += t.nbytes();
        if (table) {
          ojson r = {{"name", name}, {"dtype", dt}, {"shape", shape_json(t.shape())}, {"bytes", t.nbytes()}};
          if (files.size() > 1) r["file"] = p.filename().string();
          rows.push_back(std::move(r));
        }
      }
      continue;
    }
    const SafetensorsFile f = SafetensorsFile::open(p);
    if (files.size() == 1)
      for (const auto& [k, v] : f.metadata()) metadata[k] = v;
    for (const auto& e : f.entries()) {
      if (index && !index->weight_map().count(e.name)) continue;  // not part of this checkpoint
      ++count;
      ++dtypes[e.dtype_name];
      params += numel_of(e.shape);
      bytes += e.nbytes();
      if (table) {
        ojson r = {{"name", e.name}, {"dtype", e.dtype_name}, {"shape", shape_json(e.shape)},
                   {"bytes", e.nbytes()}};
        if (files.size() > 1) r["file"] = p.filename().string();
        rows.push_back(std::move(r));
      }
    }
  }
  ojson s = {{"files", ojson::array()}, {"tensor_count", count}, {"dtypes", ojson::object()},
             {"parameters", params}, {"bytes", bytes}};
  for (const auto& p : files) s["files"].push_back(p.filename().string());
  for (const auto& [k, v] : dtypes) s["dtypes"][k] = v;
  if (files.size() == 1 && !metadata.empty()) s["metadata"] = metadata;
  if (table) {
    std::sort(rows.begin(), rows.end(),
              [](const ojson& a, const ojson& b) { return a["name"] < b["name"]; });
    s["tensors"] = std::move(rows);
  }
  return s;
}

ojson weights_json(const WeightFiles& w, bool table) {
  std::optional<ShardedSafetensors> idx;
  if (w.index) idx = ShardedSafetensors::open(*w.index);
  ojson s = summarize_files(w.files, table, idx ? &*idx : nullptr);
  ojson out = {{"variant", w.variant}};
  if (w.index) out["index"] = w.index->filename().string();
  for (auto& [k, v] : s.items()) out[k] = v;
  return out;
}

// BFL fp8r / nvfp4 single files (detected from the tensors as Diffusers' BFLQuantizer does): a layer is
// nvfp4 when it has .weight_scale and .weight_scale_2, fp8r when it has .weight_scale and a float8 weight.
ojson bfl_quantization(const ojson& rows) {
  std::map<std::string, std::string> dtype;
  for (const auto& r : rows) dtype[r["name"].get<std::string>()] = r["dtype"].get<std::string>();
  uint64_t fp8r = 0, nvfp4 = 0;
  const std::string suffix = ".weight_scale";
  for (const auto& [k, d] : dtype) {
    if (!k.ends_with(suffix)) continue;
    const std::string p = k.substr(0, k.size() - suffix.size());
    if (dtype.count(p + ".weight_scale_2")) ++nvfp4;
    else if (dtype.count(p + ".weight") && dtype[p + ".weight"] == "F8_E4M3") ++fp8r;
  }
  if (fp8r + nvfp4 == 0) return nullptr;
  return {{"format", "bfl"}, {"fp8r_layers", fp8r}, {"nvfp4_layers", nvfp4}};
}

// A short name of a saved quantization_config's scheme where the config alone names it (ModelOpt exports:
// quant_algo, and per algorithm the layer counts of MIXED_PRECISION); empty otherwise.
std::string quantization_label(const nlohmann::json& qc) {
  if (!qc.is_object() || qc.value("quant_method", "") != "modelopt" || !qc.contains("quant_algo")) return "";
  std::string out = "modelopt " + qc["quant_algo"].get<std::string>();
  if (qc.contains("quantized_layers") && qc["quantized_layers"].is_object()) {
    std::map<std::string, int> n;
    for (const auto& [m, v] : qc["quantized_layers"].items()) ++n[v.value("quant_algo", "?")];
    std::string per;
    for (const auto& [a, c] : n) per += (per.empty() ? "" : ", ") + a + " x" + std::to_string(c);
    out += " (" + per + ")";
  }
  return out;
}

ojson pipeline_json(const fs::path& root) {
  const DiffusersFolder d = DiffusersFolder::open(root);
  ojson j = {{"kind", "diffusers_pipeline"}, {"path", root.string()},
             {"pipeline_class", d.pipeline_class()}, {"diffusers_version", d.diffusers_version()},
             {"settings", ojson::parse(d.settings().dump())},
             {"skipped_components", d.skipped_components()}, {"components", ojson::array()}};
  for (const Component& c : d.components()) {
    ojson cj = {{"name", c.name}, {"library", c.library}, {"class_name", c.class_name},
                {"config", c.config_path.empty() ? "" : c.config_path.filename().string()},
                {"variants", c.variants}, {"weights", ojson::array()}};
    for (const auto& v : c.variants) cj["weights"].push_back(weights_json(find_weight_files(c.dir, v), false));
    if (const nlohmann::json* q = c.quantization_config()) {
      cj["quantization_config"] = ojson::parse(q->dump());
      if (const std::string l = quantization_label(*q); !l.empty()) cj["quantization"] = l;
    }
    j["components"].push_back(std::move(cj));
  }
  return j;
}

ojson model_folder_json(const fs::path& dir) {
  ojson j = {{"kind", "model_folder"}, {"path", dir.string()}, {"weights", ojson::array()}};
  if (fs::is_regular_file(dir / "config.json")) {
    const nlohmann::json cfg = read_json_file(dir / "config.json", kCtx);
    if (cfg.is_object()) {
      if (cfg.contains("_class_name")) j["class_name"] = cfg["_class_name"];
      else if (cfg.contains("architectures")) j["class_name"] = cfg["architectures"];
      if (cfg.contains("quantization_config")) {
        j["quantization_config"] = ojson::parse(cfg["quantization_config"].dump());
        if (const std::string l = quantization_label(cfg["quantization_config"]); !l.empty()) j["quantization"] = l;
      }
    }
  }
  for (const auto& v : find_weight_variants(dir)) j["weights"].push_back(weights_json(find_weight_files(dir, v), true));
  check(!j["weights"].empty(), kCtx, dir.string(),
        " has neither model_index.json nor safetensors weights");
  return j;
}

ojson gguf_json(const fs::path& p) {
  const GGUFFile f = GGUFFile::open(p);
  const GGUFHeader& h = f.header();
  ojson j = {{"kind", "gguf"}, {"path", p.string()}, {"version", h.version},
             {"alignment", h.alignment}, {"metadata", ojson::object()}, {"types", ojson::object()},
             {"tensor_count", h.tensors.size()}, {"parameters", 0}, {"bytes", 0},
             {"tensors", ojson::array()}};
  for (const auto& [k, v] : h.kv) j["metadata"][k] = ojson::parse(v.to_json(16).dump());
  uint64_t params = 0, bytes = 0;
  std::map<std::string, uint64_t> types;
  for (const auto& t : h.tensors) {
    params += t.numel;
    bytes += t.nbytes;
    ++types[std::string(t.type_name())];
    j["tensors"].push_back({{"name", t.name}, {"type", t.type_name()}, {"shape", shape_json(t.shape)},
                            {"bytes", t.nbytes}});
  }
  for (const auto& [k, v] : types) j["types"][k] = v;
  j["parameters"] = params;
  j["bytes"] = bytes;
  return j;
}

bool has_gguf_magic(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  char m[4] = {};
  in.read(m, 4);
  return in.gcount() == 4 && std::memcmp(m, "GGUF", 4) == 0;
}

// ---- text rendering ----------------------------------------------------------------------------------

std::string dtypes_str(const ojson& d) {
  std::string s;
  for (const auto& [k, v] : d.items()) s += cat(s.empty() ? "" : ", ", k, " x", v.get<uint64_t>());
  return s.empty() ? "-" : s;
}

std::string shape_text(const ojson& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += cat(i ? ", " : "", s[i].get<int64_t>());
  return out + "]";
}

void table(std::string& out, const ojson& rows, const char* type_key, bool with_file) {
  std::vector<std::vector<std::string>> cells = {{"name", type_key, "shape", "bytes"}};
  if (with_file) cells[0].push_back("file");
  for (const auto& r : rows) {
    cells.push_back({r["name"].get<std::string>(), r[type_key].get<std::string>(),
                     shape_text(r["shape"]), format_bytes(r["bytes"].get<uint64_t>())});
    if (with_file) cells.back().push_back(r.value("file", ""));
  }
  std::vector<size_t> w(cells[0].size(), 0);
  for (const auto& row : cells)
    for (size_t c = 0; c < row.size(); ++c) w[c] = std::max(w[c], row[c].size());
  for (const auto& row : cells) {
    std::string line = "  ";
    for (size_t c = 0; c < row.size(); ++c) {
      line += row[c];
      if (c + 1 < row.size()) line.append(w[c] - row[c].size() + 2, ' ');
    }
    out += line + "\n";
  }
}

void weights_text(std::string& out, const ojson& w, const std::string& indent) {
  out += cat(indent, w["variant"].get<std::string>().empty() ? "default" : w["variant"].get<std::string>(),
             ": ", w["tensor_count"].get<uint64_t>(), " tensors (", dtypes_str(w["dtypes"]), "), ",
             format_count(w["parameters"].get<uint64_t>()), " parameters, ",
             format_bytes(w["bytes"].get<uint64_t>()), ", ", w["files"].size(), " file",
             w["files"].size() == 1 ? "" : "s", w.contains("index") ? " (sharded)" : "", "\n");
}
}  // namespace

std::string format_count(uint64_t n) {
  static const char* suffix[] = {"", "K", "M", "B", "T"};
  if (n < 1000) return std::to_string(n);
  double v = double(n);
  int u = 0;
  while (v >= 1000.0 && u < 4) {
    v /= 1000.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%s", v, suffix[u]);
  return buf;
}

ojson inspect_json(const fs::path& path) {
  std::error_code ec;
  check(fs::exists(path, ec), kCtx, path.string(), " does not exist");
  if (fs::is_directory(path, ec)) {
    if (fs::is_regular_file(path / "model_index.json", ec)) return pipeline_json(path);
    return model_folder_json(path);
  }
  if (has_gguf_magic(path)) return gguf_json(path);
  const std::string name = path.filename().string();
  if (name.ends_with(".json")) {
    const ShardedSafetensors idx = ShardedSafetensors::open(path);  // the index format .bin shards share
    std::vector<fs::path> files;
    for (const auto& f : idx.shard_files()) files.push_back(path.parent_path() / f);
    const bool bin = !files.empty() && is_torch_checkpoint_name(files[0]);
    ojson j = {{"kind", bin ? "torch_checkpoint_index" : "safetensors_index"}, {"path", path.string()},
               {"index_metadata", ojson::parse(idx.metadata().dump())}};
    const ojson s = summarize_files(files, true, bin ? nullptr : &idx);
    for (const auto& [k, v] : s.items()) j[k] = v;
    return j;
  }
  ojson j = {{"kind", is_torch_checkpoint_name(path) ? "torch_checkpoint" : "safetensors"}, {"path", path.string()}};
  const ojson s = summarize_files({path}, true);
  for (const auto& [k, v] : s.items()) j[k] = v;
  if (ojson q = bfl_quantization(j["tensors"]); !q.is_null()) j["quantization"] = std::move(q);
  return j;
}

std::string inspect_text(const ojson& j) {
  std::string out;
  const std::string kind = j["kind"].get<std::string>();
  if (kind == "diffusers_pipeline") {
    out += cat(j["pipeline_class"].get<std::string>(), " (diffusers ",
               j["diffusers_version"].get<std::string>(), ")  ", j["path"].get<std::string>(), "\n");
    if (!j["settings"].empty()) out += cat("  settings: ", j["settings"].dump(), "\n");
    for (const auto& c : j["components"]) {
      out += cat("  ", c["name"].get<std::string>(), ": ", c["library"].get<std::string>(), ".",
                 c["class_name"].get<std::string>(), c["weights"].empty() ? "  (no weights)" : "", "\n");
      for (const auto& w : c["weights"]) weights_text(out, w, "      ");
      if (c.contains("quantization"))
        out += cat("      quantization: ", c["quantization"].get<std::string>(), "\n");
      if (c.contains("quantization_config"))
        out += cat("      quantization_config: ", c["quantization_config"].dump(), "\n");
    }
    if (!j["skipped_components"].empty()) {
      std::string s;
      for (const auto& n : j["skipped_components"]) s += (s.empty() ? "" : ", ") + n.get<std::string>();
      out += cat("  not present: ", s, "\n");
    }
    return out;
  }
  if (kind == "model_folder") {
    out += cat("model folder ", j["path"].get<std::string>(),
               j.contains("class_name") ? cat("  (", j["class_name"].dump(), ")") : "", "\n");
    if (j.contains("quantization")) out += cat("  quantization: ", j["quantization"].get<std::string>(), "\n");
    if (j.contains("quantization_config"))
      out += cat("  quantization_config: ", j["quantization_config"].dump(), "\n");
    for (const auto& w : j["weights"]) weights_text(out, w, "  ");
    const auto& first = j["weights"][0];
    table(out, first["tensors"], "dtype", first["files"].size() > 1);
    return out;
  }
  if (kind == "gguf") {
    out += cat("GGUF v", j["version"].get<uint32_t>(), "  ", j["path"].get<std::string>(), "\n");
    out += cat("  alignment ", j["alignment"].get<uint64_t>(), ", ", j["tensor_count"].get<uint64_t>(),
               " tensors (", dtypes_str(j["types"]), "), ", format_count(j["parameters"].get<uint64_t>()),
               " parameters, ", format_bytes(j["bytes"].get<uint64_t>()), "\n  metadata:\n");
    for (const auto& [k, v] : j["metadata"].items()) {
      std::string s = v.dump();
      if (s.size() > 120) s = s.substr(0, 117) + "...";
      out += cat("    ", k, " = ", s, "\n");
    }
    table(out, j["tensors"], "type", false);
    return out;
  }
  // safetensors / safetensors_index
  const std::map<std::string, std::string> titles = {{"safetensors", "safetensors "},
                                                     {"safetensors_index", "sharded safetensors "},
                                                     {"torch_checkpoint", "PyTorch checkpoint "},
                                                     {"torch_checkpoint_index", "sharded PyTorch checkpoint "}};
  out += cat(titles.at(kind),
             j["path"].get<std::string>(), "\n");
  out += cat("  ", j["tensor_count"].get<uint64_t>(), " tensors (", dtypes_str(j["dtypes"]), "), ",
             format_count(j["parameters"].get<uint64_t>()), " parameters, ",
             format_bytes(j["bytes"].get<uint64_t>()), ", ", j["files"].size(), " file",
             j["files"].size() == 1 ? "" : "s", "\n");
  if (j.contains("quantization"))
    out += cat("  quantization: BFL fp8r (", j["quantization"]["fp8r_layers"].get<uint64_t>(), " layers), nvfp4 (",
               j["quantization"]["nvfp4_layers"].get<uint64_t>(), " layers)\n");
  if (j.contains("metadata"))
    for (const auto& [k, v] : j["metadata"].items()) out += cat("  metadata ", k, " = ", v.dump(), "\n");
  if (j.contains("index_metadata"))
    for (const auto& [k, v] : j["index_metadata"].items()) out += cat("  index ", k, " = ", v.dump(), "\n");
  table(out, j["tensors"], "dtype", j["files"].size() > 1);
  return out;
}

}  // namespace diffq::io
