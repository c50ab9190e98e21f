#include "lora/lora_adapter.h"

#include <algorithm>
#include <cmath>

#include "diffq/error.h"

namespace diffq::lora {

namespace {
constexpr const char* kCtx = "lora";

bool ends_with(const std::string& s, const std::string& e) {
  return s.size() >= e.size() && s.compare(s.size() - e.size(), e.size(), e) == 0;
}

// PEFT's get_pattern_key: a pattern key names the module itself or a dotted suffix of it.
const nlohmann::json* pattern(const nlohmann::json& pats, const std::string& module) {
  if (!pats.is_object()) return nullptr;
  for (auto it = pats.begin(); it != pats.end(); ++it)
    if (module == it.key() || ends_with(module, "." + it.key())) return &it.value();
  return nullptr;
}

// Old (pre-PEFT) Diffusers text-encoder names -> PEFT's (Diffusers' DIFFUSERS_OLD_TO_PEFT).
std::pair<std::string, char> split_key(const std::string& k) {
  static const std::vector<std::tuple<std::string, std::string, char>> rules = {
      {".lora_A.weight", "", 'A'},
      {".lora_B.weight", "", 'B'},
      {".lora_B.bias", "", 'b'},
      {".to_q_lora.down.weight", ".q_proj", 'A'},
      {".to_q_lora.up.weight", ".q_proj", 'B'},
      {".to_k_lora.down.weight", ".k_proj", 'A'},
      {".to_k_lora.up.weight", ".k_proj", 'B'},
      {".to_v_lora.down.weight", ".v_proj", 'A'},
      {".to_v_lora.up.weight", ".v_proj", 'B'},
      {".to_out_lora.down.weight", ".out_proj", 'A'},
      {".to_out_lora.up.weight", ".out_proj", 'B'},
      {".lora_linear_layer.down.weight", "", 'A'},
      {".lora_linear_layer.up.weight", "", 'B'},
  };
  for (const auto& [suffix, repl, which] : rules)
    if (ends_with(k, suffix)) return {k.substr(0, k.size() - suffix.size()) + repl, which};
  return {k, '?'};
}

struct Pair {
  Tensor A, B, bias;
};
}  // namespace

std::vector<AdapterTarget> build_adapter(const LoraStateDict& sd, const std::map<std::string, Module*>& components,
                                         bool lenient, std::vector<std::string>& warnings, const std::string& file) {
  std::vector<std::string> bad;  // unknown or mismatched, all listed
  std::vector<std::string> unprefixed;
  // component -> module -> A/B
  std::map<std::string, std::map<std::string, Pair>> found;
  for (const auto& [key, t] : sd.tensors) {
    auto [path, which] = split_key(key);
    if (which == '?') {
      bad.push_back(key + " (not a lora_A/lora_B weight)");
      continue;
    }
    std::string comp = path.substr(0, path.find('.'));
    std::string mod = path.find('.') == std::string::npos ? "" : path.substr(path.find('.') + 1);
    if (!components.count(comp)) {
      // Diffusers' kohya conversion leaves targets outside the blocks without "transformer." (and then drops them).
      if ((sd.format == LoraFormat::kohya || sd.format == LoraFormat::comfyui) && components.count("transformer") &&
          components.at("transformer") && components.at("transformer")->find_module(path)) {
        if (std::find(unprefixed.begin(), unprefixed.end(), path) == unprefixed.end()) unprefixed.push_back(path);
        comp = "transformer";
        mod = path;
      } else {
        bad.push_back(key + " (no component '" + comp + "')");
        continue;
      }
    }
    Module* root = components.at(comp);
    if (!root) {
      bad.push_back(key + " (the pipeline has no " + comp + " loaded)");
      continue;
    }
    Module* m = root->find_module(mod);
    if (!m && mod.rfind("text_model.", 0) == 0) m = root->find_module(mod = mod.substr(11));  // flattened CLIP
    if (!m || !dynamic_cast<Linear*>(m)) {
      bad.push_back(key + (m ? " (not a Linear: " + m->type_name() + ")" : " (no such module)"));
      continue;
    }
    (which == 'A' ? found[comp][mod].A : which == 'B' ? found[comp][mod].B : found[comp][mod].bias) = t;
  }
  if (!unprefixed.empty()) {
    std::string list;
    for (const auto& p : unprefixed) list += (list.empty() ? "" : ", ") + p;
    warnings.push_back(cat(file, ": applied to the transformer: ", list, " (Diffusers 0.42.1 converts these kohya keys "
                           "without the 'transformer.' prefix and then ignores them, so its output differs)"));
  }

  std::vector<AdapterTarget> out;
  for (const auto& [comp, mods] : found) {
    const nlohmann::json& md = sd.adapter_metadata;
    const bool has_md = md.is_object() && md.contains(comp + ".r");
    std::map<std::string, double> alphas;  // module -> network alpha
    for (const auto& [k, a] : sd.network_alphas)
      if (k.rfind(comp + ".", 0) == 0 && ends_with(k, ".alpha")) alphas[k.substr(comp.size() + 1, k.size() - comp.size() - 7)] = a;
    double common_alpha = 0;
    {
      std::map<double, int> count;
      for (const auto& [m, a] : alphas) ++count[a];
      int best = 0;
      for (const auto& [a, n] : count)
        if (n > best) best = n, common_alpha = a;
    }
    for (const auto& [mod, p] : mods) {
      const std::string path = comp + "." + mod;
      auto* lin = dynamic_cast<Linear*>(components.at(comp)->find_module(mod));
      if (!p.A.defined() || !p.B.defined()) {
        bad.push_back(path + (p.A.defined() ? " (lora_A without lora_B)" : p.B.defined() ? " (lora_B without lora_A)"
                                                                                       : " (lora_B.bias without lora_A/lora_B)"));
        continue;
      }
      if (p.bias.defined() && (p.bias.dim() != 1 || p.bias.size(0) != lin->out_features)) {
        bad.push_back(cat(path, " (lora_B.bias ", shape_str(p.bias.shape()), " does not fit the Linear's ", lin->out_features,
                          " outputs)"));
        continue;
      }
      const int64_t r = p.A.size(0);
      if (p.A.dim() != 2 || p.B.dim() != 2 || p.A.size(1) != lin->in_features || p.B.size(0) != lin->out_features ||
          p.B.size(1) != r) {
        bad.push_back(cat(path, " (A ", shape_str(p.A.shape()), ", B ", shape_str(p.B.shape()), " do not fit the Linear [",
                          lin->out_features, ", ", lin->in_features, "])"));
        continue;
      }
      double scaling = 1.0;
      if (has_md) {
        const nlohmann::json rpat = md.value(comp + ".rank_pattern", nlohmann::json()),
                             apat = md.value(comp + ".alpha_pattern", nlohmann::json());
        const nlohmann::json* rp = pattern(rpat, mod);
        const nlohmann::json* ap = pattern(apat, mod);
        const double cr = rp ? rp->get<double>() : md.at(comp + ".r").get<double>();
        const double alpha = ap ? ap->get<double>() : md.value(comp + ".lora_alpha", cr);
        if (cr != double(r)) {
          bad.push_back(cat(path, " (rank ", r, " but the adapter config says r=", cr, ")"));
          continue;
        }
        scaling = md.value(comp + ".use_rslora", false) ? alpha / std::sqrt(cr) : alpha / cr;
      } else if (!alphas.empty()) {
        auto it = alphas.find(mod);
        scaling = (it != alphas.end() ? it->second : common_alpha) / double(r);
      }
      out.push_back({path, lin, p.A, p.B, p.bias, scaling});
    }
  }
  if (!bad.empty()) {
    std::string list;
    for (const auto& b : bad) list += "\n  " + b;
    const std::string msg = cat(file, ": ", bad.size(), " LoRA keys match nothing in the pipeline:", list);
    check(lenient, kCtx, msg, "\n(--lora-lenient loads the rest with a warning)");
    warnings.push_back(msg + "\n(skipped: lenient)");
  }
  check(!out.empty(), kCtx, file, ": no LoRA layer of this file applies to the pipeline");
  return out;
}

}  // namespace diffq::lora
