#include "pipelines/pipeline_quantization_config.h"

#include <algorithm>
#include <fstream>

#include "diffq/error.h"

namespace diffq {

namespace {
constexpr const char* kCtx = "PipelineQuantizationConfig";

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

bool contains(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

// Diffusers config class name -> backend (BitsAndBytesConfig's backend follows load_in_4bit/8bit).
std::optional<std::string> backend_of_class(const std::string& cls, const nlohmann::json& kwargs) {
  if (cls == "BitsAndBytesConfig")
    return kwargs.value("load_in_8bit", false) ? "bitsandbytes_8bit" : "bitsandbytes_4bit";
  if (cls == "TorchAoConfig") return "torchao";
  if (cls == "GGUFQuantizationConfig") return "gguf";
  if (cls == "QuantoConfig") return "quanto";
  if (cls == "SDNQConfig") return "sdnq";
  return std::nullopt;
}

void check_backend(const std::string& b) {
  const auto& known = PipelineQuantizationConfig::diffusers_backends();
  check(contains(known, b), kCtx, "Provided quant_backend=", b, " was not found. Available ones (diffusers): ",
        join(known), ".");
  check(contains(PipelineQuantizationConfig::supported_backends(), b), kCtx, "quant_backend=", b,
        " is a Diffusers backend that diffq does not implement (diffq: ",
        join(PipelineQuantizationConfig::supported_backends()), ")");
}
}  // namespace

const std::vector<std::string>& PipelineQuantizationConfig::diffusers_backends() {
  static const std::vector<std::string> v = {"bfl",     "bitsandbytes_4bit", "bitsandbytes_8bit", "gguf",
                                             "quanto",  "torchao",           "modelopt",          "auto-round",
                                             "nunchaku_lite", "sdnq"};
  return v;
}

const std::vector<std::string>& PipelineQuantizationConfig::supported_backends() {
  static const std::vector<std::string> v = {"bitsandbytes_4bit", "bitsandbytes_8bit", "gguf", "quanto", "torchao",
                                             "sdnq"};
  return v;
}

PipelineQuantizationConfig::PipelineQuantizationConfig(
    std::optional<std::string> quant_backend, nlohmann::json quant_kwargs, std::vector<std::string> components,
    std::optional<std::map<std::string, ComponentQuantization>> quant_mapping)
    : quant_backend_(std::move(quant_backend)),
      quant_kwargs_(quant_kwargs.is_null() ? nlohmann::json::object() : std::move(quant_kwargs)),
      components_to_quantize_(std::move(components)),
      quant_mapping_(std::move(quant_mapping)) {
  check(!(quant_backend_ && quant_mapping_), kCtx,
        "Both `quant_backend` and `quant_mapping` cannot be specified at the same time.");
  check(quant_mapping_ || quant_backend_, kCtx, "Must provide a `quant_backend` when not providing a `quant_mapping`.");
  check(!quant_kwargs_.empty() || quant_mapping_, kCtx, "Both `quant_kwargs` and `quant_mapping` cannot be None.");
  check(quant_kwargs_.is_object(), kCtx, "quant_kwargs must be an object, got ", quant_kwargs_.dump());
  if (quant_backend_) check_backend(*quant_backend_);
  if (quant_mapping_) {
    for (const auto& [name, cq] : *quant_mapping_) {
      check(contains(diffusers_backends(), cq.backend), kCtx, "Provided config for module_name=", name,
            " could not be found. Available diffusers configs: BitsAndBytesConfig, TorchAoConfig, "
            "GGUFQuantizationConfig, QuantoConfig.");
      check_backend(cq.backend);
    }
  }
}

PipelineQuantizationConfig PipelineQuantizationConfig::from_json(const nlohmann::json& j, const std::string& source) {
  check(j.is_object(), kCtx, source, ": expected a JSON object, got ", j.type_name());
  for (const auto& [k, v] : j.items())
    check(k == "quant_backend" || k == "quant_kwargs" || k == "components_to_quantize" || k == "quant_mapping", kCtx,
          source, ": unknown key '", k, "' (expected quant_backend, quant_kwargs, components_to_quantize, quant_mapping)");
  std::optional<std::string> backend;
  if (j.contains("quant_backend") && !j.at("quant_backend").is_null()) {
    check(j.at("quant_backend").is_string(), kCtx, source, ": quant_backend must be a string");
    backend = j.at("quant_backend").get<std::string>();
  }
  nlohmann::json kwargs = j.value("quant_kwargs", nlohmann::json::object());
  std::vector<std::string> comps;
  if (j.contains("components_to_quantize") && !j.at("components_to_quantize").is_null()) {
    const auto& c = j.at("components_to_quantize");
    if (c.is_string()) {
      if (!c.get<std::string>().empty()) comps.push_back(c.get<std::string>());
    } else {
      check(c.is_array(), kCtx, source, ": components_to_quantize must be a string or a list of strings");
      for (const auto& x : c) {
        check(x.is_string(), kCtx, source, ": components_to_quantize entries must be strings, got ", x.dump());
        comps.push_back(x.get<std::string>());
      }
    }
  }
  std::optional<std::map<std::string, ComponentQuantization>> mapping;
  if (j.contains("quant_mapping") && !j.at("quant_mapping").is_null()) {
    const auto& m = j.at("quant_mapping");
    check(m.is_object(), kCtx, source, ": quant_mapping must be an object {component: config}");
    mapping.emplace();
    for (const auto& [name, cfg] : m.items()) {
      check(cfg.is_object(), kCtx, source, ": quant_mapping.", name, " must be an object");
      ComponentQuantization cq;
      if (cfg.contains("_class")) {
        nlohmann::json kw = cfg;
        kw.erase("_class");
        const std::string cls = cfg.at("_class").get<std::string>();
        const auto b = backend_of_class(cls, kw);
        check(b.has_value(), kCtx, "Provided config for module_name=", name, " could not be found (", cls,
              "). Available diffusers configs: BitsAndBytesConfig, TorchAoConfig, GGUFQuantizationConfig, QuantoConfig.");
        cq = {*b, kw};
      } else {
        check(cfg.contains("quant_backend") && cfg.at("quant_backend").is_string(), kCtx, source, ": quant_mapping.",
              name, " needs \"quant_backend\" (with \"quant_kwargs\") or \"_class\"");
        cq = {cfg.at("quant_backend").get<std::string>(), cfg.value("quant_kwargs", nlohmann::json::object())};
      }
      (*mapping)[name] = std::move(cq);
    }
  }
  return PipelineQuantizationConfig(backend, kwargs, comps, mapping);
}

PipelineQuantizationConfig PipelineQuantizationConfig::from_file(const std::string& path) {
  std::ifstream f(path);
  check(bool(f), kCtx, "cannot open ", path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(f);
  } catch (const std::exception& e) {
    fail(kCtx, path, ": invalid JSON: ", e.what());
  }
  return from_json(j, path);
}

std::optional<ComponentQuantization> PipelineQuantizationConfig::resolve(const std::string& component) const {
  if (quant_mapping_) {
    auto it = quant_mapping_->find(component);
    if (it != quant_mapping_->end()) return it->second;
  }
  bool quantize = false;
  if (!components_to_quantize_.empty() && contains(components_to_quantize_, component))
    quantize = true;
  else if (!quant_mapping_ && components_to_quantize_.empty())
    quantize = true;
  if (!quantize || !quant_backend_) return std::nullopt;
  return ComponentQuantization{*quant_backend_, quant_kwargs_};
}

std::string PipelineQuantizationConfig::unknown_components_warning(const std::vector<std::string>& pipeline) const {
  std::vector<std::string> named = components_to_quantize_;
  if (named.empty() && quant_mapping_)
    for (const auto& [k, v] : *quant_mapping_) named.push_back(k);
  std::vector<std::string> missing;
  for (const auto& n : named)
    if (!contains(pipeline, n)) missing.push_back(n);
  if (missing.empty()) return "";
  return "The following components in the quantization config {" + join(missing) +
         "} will be ignored as they do not belong to the underlying pipeline. Acceptable values for the pipeline "
         "components are: " + join(pipeline) + ".";
}

nlohmann::json PipelineQuantizationConfig::to_json() const {
  nlohmann::json j = nlohmann::json::object();
  if (quant_backend_) {
    j["quant_backend"] = *quant_backend_;
    j["quant_kwargs"] = quant_kwargs_;
    j["components_to_quantize"] = components_to_quantize_;
  }
  if (quant_mapping_) {
    j["quant_mapping"] = nlohmann::json::object();
    for (const auto& [k, v] : *quant_mapping_) j["quant_mapping"][k] = {{"quant_backend", v.backend}, {"quant_kwargs", v.kwargs}};
  }
  return j;
}

}  // namespace diffq
