#include "model_registry.h"

#include <cctype>
#include <cmath>
#include <cstdio>

#include "diffq/error.h"
#include "diffq/memory.h"
#include "generate_request.h"

namespace diffq::serve {

namespace {
constexpr const char* kCtx = "serve";

int64_t weight_bytes(const std::filesystem::path& folder) {
  int64_t n = 0;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(folder, ec); !ec && it != std::filesystem::end(it);
       it.increment(ec)) {
    const auto ext = it->path().extension().string();
    if (it->is_regular_file(ec) && (ext == ".safetensors" || ext == ".gguf" || ext == ".bin")) n += int64_t(it->file_size(ec));
  }
  return n;
}

nlohmann::json defaults_json(const GenerateParams& d, bool video) {
  nlohmann::json j = {{"width", d.width}, {"height", d.height}, {"steps", d.num_inference_steps}};
  if (d.guidance_scale) j["guidance"] = *d.guidance_scale;
  if (d.true_cfg_scale) j["true_cfg"] = *d.true_cfg_scale;
  if (video) j["frames"] = d.num_frames;
  return j;
}
}  // namespace

int64_t parse_size(const std::string& text) {
  size_t i = 0;
  double v = 0;
  try {
    v = std::stod(text, &i);
  } catch (const std::exception&) {
    fail(kCtx, "size '", text, "' is not a number with an optional unit (e.g. 2GiB, 512MiB)");
  }
  std::string unit = text.substr(i);
  for (char& c : unit) c = char(std::tolower(static_cast<unsigned char>(c)));
  double m = 1;
  if (unit.empty() || unit == "b") m = 1;
  else if (unit == "k" || unit == "kib" || unit == "kb") m = 1024.0;
  else if (unit == "m" || unit == "mib" || unit == "mb") m = 1024.0 * 1024;
  else if (unit == "g" || unit == "gib" || unit == "gb") m = 1024.0 * 1024 * 1024;
  else if (unit == "t" || unit == "tib" || unit == "tb") m = 1024.0 * 1024 * 1024 * 1024;
  else fail(kCtx, "size '", text, "': unknown unit '", unit, "' (B, KiB, MiB, GiB, TiB)");
  check(v >= 0 && std::isfinite(v), kCtx, "size '", text, "' must be >= 0");
  return int64_t(v * m);
}

ModelRegistry::ModelRegistry(std::vector<std::pair<std::string, std::filesystem::path>> models, LoadOptions opt,
                             int64_t budget_bytes, bool preload)
    : opt_(std::move(opt)), budget_(budget_bytes) {
  check(!models.empty(), kCtx, "no model to serve");
  for (auto& [name, folder] : models) {
    for (const auto& e : entries_) check(e.name != name, kCtx, "two models are named '", name, "' (use -m name=folder)");
    ModelEntry e;
    e.name = name;
    e.folder = folder;
    e.pipeline_class = DiffusionPipeline::pipeline_class_of(folder);
    check(e.pipeline_class == "FluxPipeline" || e.pipeline_class == "WanPipeline", kCtx, folder.string(),
          ": pipeline class '", e.pipeline_class, "' is not one diffq runs");
    e.kind = e.pipeline_class == "WanPipeline" ? "video" : "image";
    e.bytes = weight_bytes(folder);
    entries_.push_back(std::move(e));
  }
  if (!preload) return;
  std::lock_guard lk(mu_);
  for (auto& e : entries_)
    if (budget_ == 0 || loaded_bytes() + e.bytes <= budget_) load(e);
}

void ModelRegistry::load(ModelEntry& e) {
  PipelineOptions po;
  const DType dtype = parse_dtype(opt_.dtype);
  po.dtype = dtype;
  po.quantization_config_json = opt_.quantization_config_json;
  po.device = Device::parse(opt_.device);
  std::fprintf(stderr, "serve: loading %s (%s) from %s\n", e.name.c_str(), e.pipeline_class.c_str(),
               e.folder.string().c_str());
  auto pipe = DiffusionPipeline::from_pretrained(e.folder, po);
  if (!opt_.offload.empty()) pipe->enable_offload(opt_.offload);
  if (!opt_.compile.empty()) pipe->compile(opt_.compile);
  e.defaults = defaults_json(pipe->defaults(), pipe->generates_video());
  e.pipe = std::move(pipe);
  ++e.loads;
}

std::string ModelRegistry::resolve(const std::string& name) const {
  if (name.empty()) return entries_.front().name;
  for (const auto& e : entries_)
    if (e.name == name) return name;
  std::string names;
  for (const auto& e : entries_) names += (names.empty() ? "" : ", ") + e.name;
  throw app::RequestError(404, "model", cat("model '", name, "' is not served here (", names, ")"));
}

std::string ModelRegistry::kind_of(const std::string& name) const {
  const std::string n = resolve(name);
  for (const auto& e : entries_)
    if (e.name == n) return e.kind;
  return "image";
}

std::shared_ptr<DiffusionPipeline> ModelRegistry::acquire(const std::string& name) {
  const std::string n = resolve(name);
  std::lock_guard lk(mu_);
  ModelEntry* want = nullptr;
  for (auto& e : entries_)
    if (e.name == n) want = &e;
  want->last_used = std::chrono::steady_clock::now();
  if (want->pipe) return want->pipe;
  // Evict least recently used until it fits.
  while (budget_ > 0 && loaded_bytes() + want->bytes > budget_) {
    ModelEntry* lru = nullptr;
    for (auto& e : entries_)
      if (e.pipe && (!lru || e.last_used < lru->last_used)) lru = &e;
    if (!lru) break;  // nothing left to evict: load anyway (one model always runs)
    std::fprintf(stderr, "serve: evicting %s (least recently used)\n", lru->name.c_str());
    lru->pipe.reset();
    return_freed_memory_to_os();
  }
  load(*want);
  return want->pipe;
}

int64_t ModelRegistry::loaded_bytes() const {
  int64_t n = 0;
  for (const auto& e : entries_)
    if (e.pipe) n += e.bytes;
  return n;
}

std::vector<std::string> ModelRegistry::names() const {
  std::vector<std::string> out;
  for (const auto& e : entries_) out.push_back(e.name);
  return out;
}

nlohmann::json ModelRegistry::list() const {
  std::lock_guard lk(mu_);
  nlohmann::json data = nlohmann::json::array();
  for (const auto& e : entries_)
    data.push_back({{"id", e.name}, {"object", "model"}, {"owned_by", "diffq"}, {"kind", e.kind},
                    {"pipeline", e.pipeline_class}, {"loaded", bool(e.pipe)}, {"bytes", e.bytes},
                    {"defaults", e.defaults.is_null() ? nlohmann::json::object() : e.defaults}});
  return data;
}

}  // namespace diffq::serve
