#include "pipelines/pipeline_loras.h"

#include <algorithm>

#include "diffq/error.h"

namespace diffq {

namespace {
constexpr const char* kCtx = "lora";

bool any_module(const std::map<std::string, Module*>& m) {
  return std::any_of(m.begin(), m.end(), [](const auto& kv) { return kv.second != nullptr; });
}

std::string loaded_names(const std::vector<DiffusionPipeline::LoraInfo>& infos) {
  std::string s;
  for (const auto& i : infos) s += (s.empty() ? "" : ", ") + i.name + (i.component == "transformer" ? "" : " (" + i.component + ")");
  return s.empty() ? "none" : s;
}
}  // namespace

bool PipelineLoras::Entry::has(const std::string& name) const {
  const auto a = manager->adapters();
  return std::find(a.begin(), a.end(), name) != a.end();
}

PipelineLoras::PipelineLoras(std::vector<Place> places) {
  for (auto& p : places)
    if (any_module(p.modules))
      places_.push_back({p.component, std::make_unique<lora::LoraManager>(std::move(p.modules), std::move(p.info))});
}

std::string PipelineLoras::load(const std::filesystem::path& file, const std::string& name, double weight, bool lenient,
                                bool hotswap, const std::string& component) {
  check(!places_.empty(), kCtx, "this pipeline has no component a LoRA can load into");
  Entry* e = component.empty() ? &places_.front() : nullptr;
  for (auto& p : places_)
    if (p.component == component) e = &p;
  if (!e) {
    std::string have;
    for (const auto& p : places_) have += (have.empty() ? "" : ", ") + p.component;
    fail(kCtx, file.string(), ": cannot load a LoRA into '", component, "': this pipeline has ", have,
         component == "transformer_2" ? " (load_into_transformer_2 is for Wan2.2 two-expert folders)" : "");
  }
  const size_t warned = e->manager->warnings().size();
  const std::string n = e->manager->load(file, name, weight, {.lenient = lenient, .hotswap = hotswap});
  std::vector<std::string> w(e->manager->warnings().begin() + std::ptrdiff_t(warned), e->manager->warnings().end());
  auto it = std::find_if(infos_.begin(), infos_.end(),
                         [&](const auto& i) { return i.name == n && i.component == e->component; });
  if (it == infos_.end()) {
    infos_.push_back({n, file.string(), e->component, weight, true, std::move(w)});
  } else {  // hotswap: same name, new file and weight
    it->file = file.string();
    it->weight = weight;
    it->warnings = std::move(w);
  }
  return n;
}

void PipelineLoras::set_adapters(const std::vector<std::string>& names, const std::vector<double>& weights) {
  check(weights.empty() || weights.size() == names.size(), kCtx, "set_adapters: ", names.size(), " names but ",
        weights.size(), " weights");
  for (const auto& n : names)
    check(std::any_of(places_.begin(), places_.end(), [&](const Entry& e) { return e.has(n); }), kCtx,
          "set_adapters: no adapter named '", n, "' is loaded (loaded: ", loaded_names(infos_), ")");
  for (auto& e : places_) {
    std::vector<std::string> mine;
    std::vector<double> w;
    for (size_t i = 0; i < names.size(); ++i)
      if (e.has(names[i])) {
        mine.push_back(names[i]);
        w.push_back(weights.empty() ? 1.0 : weights[i]);
      }
    e.manager->set_adapters(mine, w);
  }
  for (auto& info : infos_) {
    const auto it = std::find(names.begin(), names.end(), info.name);
    info.active = it != names.end();
    if (info.active) info.weight = weights.empty() ? 1.0 : weights[size_t(it - names.begin())];
  }
}

std::vector<std::string> PipelineLoras::fuse(double scale) {
  check(!infos_.empty(), kCtx, "fuse_lora: no LoRA is loaded");
  check(!fused(), kCtx, "fuse_lora: already fused (unfuse_lora first)");
  std::vector<std::string> unfused;
  for (auto& e : places_) {
    if (e.manager->adapters().empty()) continue;
    for (auto& n : e.manager->fuse(scale)) unfused.push_back(e.component == "transformer" ? n : e.component + ": " + n);
  }
  return unfused;
}

void PipelineLoras::unfuse() {
  for (auto& e : places_) e.manager->unfuse();
}

bool PipelineLoras::fused() const {
  return std::any_of(places_.begin(), places_.end(), [](const Entry& e) { return e.manager->fused(); });
}

void PipelineLoras::unload(const std::string& name) {
  if (name.empty()) {
    for (auto& e : places_) e.manager->unload();
    infos_.clear();
    return;
  }
  bool found = false;
  for (auto& e : places_)
    if (e.has(name)) {
      e.manager->unload(name);
      found = true;
    }
  check(found, kCtx, "unload_lora: no adapter named '", name, "' is loaded (loaded: ", loaded_names(infos_), ")");
  infos_.erase(std::remove_if(infos_.begin(), infos_.end(), [&](const auto& i) { return i.name == name; }), infos_.end());
}

void PipelineLoras::mark_compiled() {
  for (auto& e : places_) e.manager->mark_compiled();
}

}  // namespace diffq
