#include "lora/lora_manager.h"

#include <algorithm>
#include <cstdio>

#include "diffq/error.h"
#include "lora/lora_adapter.h"

namespace diffq::lora {

namespace {
constexpr const char* kCtx = "lora";
}

LoraManager::LoraManager(std::map<std::string, Module*> components, LoraModelInfo info)
    : components_(std::move(components)), info_(std::move(info)) {}

LoraLinear& LoraManager::slot_holder(Linear& lin) {
  if (!lin.adapter) lin.adapter = std::make_shared<LoraLinear>();
  auto* l = dynamic_cast<LoraLinear*>(lin.adapter.get());
  check(l != nullptr, kCtx, "'", lin.weight.name, "' carries an adapter that is not a LoRA");
  return *l;
}

std::string LoraManager::load(const std::filesystem::path& file, const std::string& name, double weight,
                              const LoadOptions& o) {
  LoraModelInfo info = info_;
  info.lenient = o.lenient;
  return load(read_lora_file(file, info), name, weight, o, file.string());
}

std::string LoraManager::load(const LoraStateDict& sd, const std::string& name_in, double weight, const LoadOptions& o,
                              const std::string& file) {
  check(!fused_, kCtx, "load_lora while adapters are fused: unfuse_lora first");
  const std::string name = name_in.empty() ? cat("default_", order_.size()) : name_in;
  const bool exists = std::find(order_.begin(), order_.end(), name) != order_.end();
  check(!exists || o.hotswap, kCtx, "an adapter named '", name, "' is already loaded (pass hotswap to replace its weights)");
  check(exists || !o.hotswap, kCtx, "hotswap: no adapter named '", name, "' is loaded to swap");
  for (const auto& n : sd.notes) std::fprintf(stderr, "[lora] %s: %s\n", file.c_str(), n.c_str());
  std::vector<std::string> warn;
  auto targets = build_adapter(sd, components_, o.lenient, warn, file);
  for (const auto& w : warn) {
    std::fprintf(stderr, "[lora] warning: %s\n", w.c_str());
    warnings_.push_back(w);
  }
  if (compiled_) {  // only layers whose adapter slot existed at capture read adapters at run time
    std::string missing;
    for (const auto& t : targets)
      if (!t.linear->adapter) missing += "\n  " + t.path;
    check(missing.empty(), kCtx, file, ": the transformer was compiled before these layers had a LoRA; compile "
          "again after loading (or load a LoRA on them before compiling, then swap it):", missing);
  }
  if (exists) {  // hotswap: the old weights of this adapter leave every layer
    for (Linear* lin : targets_[name]) {
      auto& l = slot_holder(*lin);
      l.slots.erase(std::remove_if(l.slots.begin(), l.slots.end(), [&](const auto& s) { return s.adapter == name; }),
                    l.slots.end());
    }
    targets_[name].clear();
  } else {
    order_.push_back(name);
  }
  for (auto& t : targets) {
    LoraLinear::Slot s;
    s.adapter = name;
    s.A = t.A;
    s.B = t.B;
    s.bias = t.bias;
    s.scaling = t.scaling;
    s.weight = weight;
    slot_holder(*t.linear).slots.push_back(std::move(s));
    targets_[name].push_back(t.linear);
  }
  return name;
}

void LoraManager::set_adapters(const std::vector<std::string>& names, const std::vector<double>& weights) {
  check(weights.empty() || weights.size() == names.size(), kCtx, "set_adapters: ", names.size(), " names but ",
        weights.size(), " weights");
  for (const auto& n : names)
    check(targets_.count(n), kCtx, "set_adapters: no adapter named '", n, "' (loaded: ", order_.size(), ")");
  std::map<std::string, std::pair<size_t, double>> want;
  for (size_t i = 0; i < names.size(); ++i) want[names[i]] = {i, weights.empty() ? 1.0 : weights[i]};
  std::vector<Linear*> all;
  for (auto& [n, lins] : targets_) all.insert(all.end(), lins.begin(), lins.end());
  std::sort(all.begin(), all.end());
  all.erase(std::unique(all.begin(), all.end()), all.end());
  for (Linear* lin : all) {
    auto& l = slot_holder(*lin);
    for (auto& s : l.slots) {
      auto it = want.find(s.adapter);
      s.active = it != want.end();
      if (s.active) s.weight = it->second.second;
    }
    // PEFT adds the active adapters in set_adapters' order.
    std::stable_sort(l.slots.begin(), l.slots.end(), [&](const auto& a, const auto& b) {
      const size_t ia = want.count(a.adapter) ? want[a.adapter].first : names.size();
      const size_t ib = want.count(b.adapter) ? want[b.adapter].first : names.size();
      return ia < ib;
    });
  }
}

std::vector<std::string> LoraManager::fuse(double scale) {
  check(!fused_, kCtx, "fuse_lora: already fused (unfuse_lora first)");
  for (const auto& [c, m] : components_) {
    if (!m) continue;
    for (const auto& [path, sub] : m->named_modules())
      check(sub->hooks().empty(), kCtx, "fuse_lora: ", c, (path.empty() ? "" : "." + path),
            " has offload hooks; fuse before enabling offloading");
  }
  std::vector<std::string> unfused;
  for (auto& [n, lins] : targets_)
    for (Linear* lin : lins) {
      auto& l = slot_holder(*lin);
      if (l.merged) continue;
      if (!lora::fuse(*lin, l, scale)) unfused.push_back(lin->weight.name);
    }
  fused_ = true;
  return unfused;
}

void LoraManager::unfuse() {
  for (auto& [n, lins] : targets_)
    for (Linear* lin : lins) lora::unfuse(*lin, slot_holder(*lin));
  fused_ = false;
}

void LoraManager::unload(const std::string& name) {
  if (fused_) unfuse();
  std::vector<std::string> names = name.empty() ? order_ : std::vector<std::string>{name};
  for (const auto& n : names) {
    check(targets_.count(n), kCtx, "unload_lora: no adapter named '", n, "'");
    for (Linear* lin : targets_[n]) {
      auto& l = slot_holder(*lin);
      l.slots.erase(std::remove_if(l.slots.begin(), l.slots.end(), [&](const auto& s) { return s.adapter == n; }),
                    l.slots.end());
      // An empty slot list stays attached when compiled (the graph calls this layer opaquely); else it goes.
      if (l.slots.empty() && !compiled_) lin->adapter.reset();
    }
    targets_.erase(n);
    order_.erase(std::find(order_.begin(), order_.end(), n));
  }
}

}  // namespace diffq::lora
