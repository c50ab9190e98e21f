#include "quant/autoround/autoround_method.h"

#include "diffq/error.h"
#include "quant/autoround/autoround_weight.h"

namespace diffq::quant::autoround {

namespace {
constexpr const char* kCtx = "autoround.config";

template <class T>
T field(const nlohmann::json& j, const char* name, T def, const std::string& where) {
  if (!j.contains(name) || j.at(name).is_null()) return def;
  try {
    return j.at(name).get<T>();
  } catch (const std::exception&) {
    fail(kCtx, where, ": ", name, " has the wrong type: ", j.at(name).dump());
  }
}

struct Layer {
  AutoRoundLayout layout;
  bool quantized = true;
};

Layer parse_layer(const nlohmann::json& j, const Layer& base, const std::string& where) {
  Layer l = base;
  l.layout.bits = field<int>(j, "bits", base.layout.bits, where);
  l.layout.group_size = field<int64_t>(j, "group_size", base.layout.group_size, where);
  const std::string dt = field<std::string>(j, "data_type", "int", where);
  if (l.layout.bits >= 16) {
    l.quantized = false;
    return l;
  }
  check(dt == "int" || dt == "int_sym" || dt == "int_asym", kCtx, where, ": data_type '", dt,
        "' is not supported by diffq (int)");
  check(l.layout.bits == 2 || l.layout.bits == 4 || l.layout.bits == 8, kCtx, where, ": bits=", l.layout.bits,
        " is not supported by diffq (2, 4, 8)");
  check(l.layout.group_size == -1 || l.layout.group_size > 0, kCtx, where, ": group_size=", l.layout.group_size,
        " (expected -1 or > 0)");
  const int act = field<int>(j, "act_bits", 16, where);
  check(act >= 16, kCtx, where, ": act_bits=", act, " (activation quantization) is not supported by diffq");
  return l;
}

class AutoRoundMethod final : public QuantMethod {
 public:
  AutoRoundMethod(nlohmann::json qc, const std::string& source) : qc_(std::move(qc)) {
    const std::string fmt = field<std::string>(qc_, "packing_format", "auto_round:auto_gptq", source);
    check(fmt.find("awq") == std::string::npos && (fmt.find("auto_round") != std::string::npos ||
                                                    fmt.find("gptq") != std::string::npos),
          kCtx, source, ": packing_format '", fmt, "' is not supported by diffq (auto_round, auto_round:auto_gptq)");
    base_.layout.zero_minus_one = fmt.find("gptq") != std::string::npos && fmt.find("gptqmodel") == std::string::npos;
    base_.layout.bits = 4;
    base_.layout.group_size = 128;
    base_ = parse_layer(qc_, base_, source);
    if (qc_.contains("extra_config") && !qc_.at("extra_config").is_null()) {
      check(qc_.at("extra_config").is_object(), kCtx, source, ": extra_config must be an object");
      for (const auto& [name, cfg] : qc_.at("extra_config").items()) {
        check(cfg.is_object(), kCtx, source, ": extra_config.", name, " must be an object");
        layers_[name] = parse_layer(cfg, base_, source + " extra_config." + name);
      }
    }
  }
  std::string backend() const override { return "auto-round"; }
  std::string scheme() const override { return "autoround_int" + std::to_string(base_.layout.bits); }
  nlohmann::json quantization_config() const override { return qc_; }
  bool should_quantize(const std::string&, const Shape&) const override { return false; }
  std::shared_ptr<QuantizedWeight> quantize(const Tensor&) const override {
    fail(kCtx, "AutoRound quantizes with calibration: diffq (like Diffusers) only loads AutoRound checkpoints");
  }
  std::shared_ptr<QuantizedWeight> load(const io::StateDict& sd, const std::string& module, const Shape& shape,
                                        const io::Metadata*, std::vector<std::string>& consumed) const override {
    if (!sd.count(module + ".qweight")) return nullptr;
    const auto it = layers_.find(module);
    const Layer& l = it == layers_.end() ? base_ : it->second;
    check(l.quantized, kCtx, module, ": the config keeps it unquantized (bits >= 16) but the file has \"", module,
          ".qweight\"");
    return AutoRoundWeight::load(sd, module, shape, l.layout, consumed);
  }
  void save(const QuantizedWeight& w, const std::string& module, io::StateDict& out, io::Metadata&) const override {
    const auto* p = dynamic_cast<const AutoRoundWeight*>(&w);
    check(p != nullptr, "quant", "auto-round cannot save a ", w.scheme(), " weight (AutoRound is load-only)");
    p->save(out, module);
  }

 private:
  nlohmann::json qc_;
  Layer base_;
  std::map<std::string, Layer> layers_;
};

}  // namespace

std::unique_ptr<QuantMethod> make_autoround_method(const nlohmann::json& qc, const std::string& source) {
  return std::make_unique<AutoRoundMethod>(qc, source);
}

}  // namespace diffq::quant::autoround
