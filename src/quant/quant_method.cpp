// The adapters of each backend to QuantMethod, and the CLI shorthands.
#include "quant/quant_method.h"

#include <algorithm>

#include "diffq/error.h"
#include "quant/bnb/bnb_4bit.h"
#include "quant/bnb/bnb_config.h"
#include "quant/bnb/bnb_int8.h"
#include "quant/gguf/gguf_weight.h"
#include "quant/modelopt/modelopt_config.h"
#include "quant/modelopt/modelopt_weight.h"
#include "quant/nunchaku/nunchaku.h"
#include "quant/quanto/quanto.h"
#include "quant/autoround/autoround_method.h"
#include "quant/sdnq/sdnq_method.h"
#include "quant/torchao/torchao.h"

namespace diffq::quant {

void QuantMethod::finish_file(const io::StateDict&, io::Metadata&) const {}

namespace {

constexpr const char* kCtx = "quant";

template <class W>
const W& as(const QuantizedWeight& w, const char* backend) {
  const auto* p = dynamic_cast<const W*>(&w);
  check(p != nullptr, kCtx, backend, " cannot save a ", w.scheme(), " weight");
  return *p;
}

void append(io::StateDict& out, const io::NamedTensors& t) {
  for (const auto& [k, v] : t) out[k] = v;
}

// ---- bitsandbytes (4-bit and 8-bit share the config) ----
class BnbMethod final : public QuantMethod {
 public:
  explicit BnbMethod(BitsAndBytesConfig c) : c_(std::move(c)) {
    check(c_.is_quantizable(), kCtx, "bitsandbytes: neither load_in_4bit nor load_in_8bit is set");
  }
  std::string backend() const override { return c_.load_in_8bit ? "bitsandbytes_8bit" : "bitsandbytes_4bit"; }
  std::string scheme() const override { return c_.load_in_8bit ? "int8" : c_.bnb_4bit_quant_type; }
  nlohmann::json quantization_config() const override { return c_.to_json(); }
  bool should_quantize(const std::string& module, const Shape& shape) const override {
    return shape.size() == 2 && c_.should_quantize(module);
  }
  std::shared_ptr<QuantizedWeight> quantize(const Tensor& w) const override {
    if (c_.load_in_8bit) return Bnb8bitWeight::quantize(w, c_.llm_int8_threshold);
    return Bnb4bitWeight::quantize(w, Bnb4bitOptions::from_config(c_));
  }
  std::shared_ptr<QuantizedWeight> load(const io::StateDict& sd, const std::string& module, const Shape&,
                                        const io::Metadata*, std::vector<std::string>& consumed) const override {
    const std::string wk = module + ".weight";
    if (c_.load_in_8bit) {
      if (!sd.count(module + ".SCB")) return nullptr;
      auto w = Bnb8bitWeight::load(sd, module, c_.llm_int8_threshold);
      for (const char* s : {".weight", ".SCB", ".weight_format"}) consumed.push_back(module + s);
      return w;
    }
    bool found = false;
    for (auto it = sd.lower_bound(wk + "."); it != sd.end() && it->first.rfind(wk + ".", 0) == 0; ++it) {
      found = true;
      consumed.push_back(it->first);
    }
    if (!found) return nullptr;
    consumed.push_back(wk);
    return Bnb4bitWeight::load(sd, wk, c_.bnb_4bit_compute_dtype);
  }
  void save(const QuantizedWeight& w, const std::string& module, io::StateDict& out, io::Metadata&) const override {
    io::NamedTensors t;
    if (c_.load_in_8bit)
      as<Bnb8bitWeight>(w, "bitsandbytes_8bit").save(t, module);
    else
      as<Bnb4bitWeight>(w, "bitsandbytes_4bit").save(t, module + ".weight");
    append(out, t);
  }

 private:
  BitsAndBytesConfig c_;
};

// ---- torchao ----
class TorchaoMethod final : public QuantMethod {
 public:
  explicit TorchaoMethod(torchao::Config c) : c_(std::move(c)) {}
  std::string backend() const override { return "torchao"; }
  std::string scheme() const override { return c_.type_name(); }
  nlohmann::json quantization_config() const override { return c_.to_json(); }
  bool should_quantize(const std::string& module, const Shape& shape) const override {
    return torchao::should_quantize(module, shape, c_);
  }
  std::shared_ptr<QuantizedWeight> quantize(const Tensor& w) const override { return torchao::quantize(w, c_); }
  std::shared_ptr<QuantizedWeight> load(const io::StateDict& sd, const std::string& module, const Shape& shape,
                                        const io::Metadata* md, std::vector<std::string>& consumed) const override {
    const std::string pre = module + "._weight_";
    bool found = false;
    for (auto it = sd.lower_bound(pre); it != sd.end() && it->first.rfind(pre, 0) == 0; ++it) {
      found = true;
      consumed.push_back(it->first);
    }
    if (!found) return nullptr;
    return torchao::load(sd, module, shape, c_, md);
  }
  void save(const QuantizedWeight& w, const std::string& module, io::StateDict& out, io::Metadata& md) const override {
    torchao::save(w, module, out, &md);
  }
  void finish_file(const io::StateDict& out, io::Metadata& md) const override { torchao::finish_metadata(out, md); }

 private:
  torchao::Config c_;
};

// ---- quanto ----
class QuantoMethod final : public QuantMethod {
 public:
  explicit QuantoMethod(QuantoConfig c) : c_(std::move(c)) {}
  std::string backend() const override { return "quanto"; }
  std::string scheme() const override { return c_.weights_dtype; }
  nlohmann::json quantization_config() const override { return c_.to_json(); }
  bool should_quantize(const std::string& module, const Shape& shape) const override {
    return shape.size() == 2 && c_.should_quantize(module);
  }
  std::shared_ptr<QuantizedWeight> quantize(const Tensor& w) const override {
    return QuantoWeight::quantize(w, c_.qtype());
  }
  std::shared_ptr<QuantizedWeight> load(const io::StateDict& sd, const std::string& module, const Shape& shape,
                                        const io::Metadata*, std::vector<std::string>& consumed) const override {
    if (!sd.count(module + ".weight._scale")) return nullptr;
    auto w = QuantoWeight::load(sd, module, c_.qtype(), shape);
    const std::string wk = module + ".weight";
    for (auto it = sd.lower_bound(wk); it != sd.end() && it->first.rfind(wk, 0) == 0; ++it) consumed.push_back(it->first);
    for (const char* s : {".input_scale", ".output_scale"})
      if (sd.count(module + s)) consumed.push_back(module + s);
    return w;
  }
  void save(const QuantizedWeight& w, const std::string& module, io::StateDict& out, io::Metadata&) const override {
    io::NamedTensors t;
    as<QuantoWeight>(w, "quanto").save(t, module);
    append(out, t);
  }

 private:
  QuantoConfig c_;
};

// ---- GGUF block types (quantize on load; files are GGUF, written by `diffq quantize --format gguf`) ----
class GgufMethod final : public QuantMethod {
 public:
  explicit GgufMethod(GGUFQuantizationConfig c) : c_(std::move(c)) {}
  std::string backend() const override { return "gguf"; }
  std::string scheme() const override { return c_.scheme(); }
  nlohmann::json quantization_config() const override { return c_.to_json(); }
  bool should_quantize(const std::string&, const Shape& shape) const override {
    return GGUFQuantizedWeight::should_quantize(shape, c_);
  }
  std::shared_ptr<QuantizedWeight> quantize(const Tensor& w) const override { return GGUFQuantizedWeight::quantize(w, c_); }
  std::shared_ptr<QuantizedWeight> load(const io::StateDict&, const std::string&, const Shape&, const io::Metadata*,
                                        std::vector<std::string>&) const override {
    return nullptr;  // GGUF checkpoints are single files, read by the GGUF loader, not safetensors layouts
  }
  void save(const QuantizedWeight&, const std::string& module, io::StateDict&, io::Metadata&) const override {
    fail(kCtx, "gguf weights are written to .gguf files (diffq quantize --format gguf), not safetensors (", module, ")");
  }

 private:
  GGUFQuantizationConfig c_;
};

// ---- Nunchaku Lite (pre-quantized only: SVDQuant W4A4 and AWQ W4A16 targets from config.json) ----
class NunchakuMethod final : public QuantMethod {
 public:
  explicit NunchakuMethod(nunchaku::NunchakuLiteConfig c) : c_(std::move(c)) {}
  std::string backend() const override { return "nunchaku_lite"; }
  std::string scheme() const override { return c_.scheme(); }
  nlohmann::json quantization_config() const override { return c_.to_json(); }
  bool should_quantize(const std::string&, const Shape&) const override { return false; }
  std::shared_ptr<QuantizedWeight> quantize(const Tensor&) const override {
    fail(kCtx, "nunchaku_lite checkpoints are made by the nunchaku / diffuse-compressor exporters; diffq only loads them");
  }
  std::shared_ptr<QuantizedWeight> load(const io::StateDict& sd, const std::string& module, const Shape& shape,
                                        const io::Metadata*, std::vector<std::string>& consumed) const override {
    switch (c_.kind_of(module)) {
      case nunchaku::NunchakuLiteConfig::Kind::svdq:
        return nunchaku::SvdqW4A4Weight::load(sd, module, shape, c_.svdq_w4a4->rank, c_.svdq_w4a4->group_size, consumed);
      case nunchaku::NunchakuLiteConfig::Kind::awq:
        return nunchaku::AwqW4A16Weight::load(sd, module, shape, c_.awq_w4a16->group_size, consumed);
      default: return nullptr;
    }
  }
  void save(const QuantizedWeight&, const std::string& module, io::StateDict&, io::Metadata&) const override {
    fail(kCtx, "diffq does not write nunchaku_lite checkpoints (", module, ")");
  }

 private:
  nunchaku::NunchakuLiteConfig c_;
};

// ---- ModelOpt exports (read only: quantize with ModelOpt, export_hf_checkpoint) ----
class ModelOptMethod final : public QuantMethod {
 public:
  explicit ModelOptMethod(ModelOptConfig c, std::string source) : c_(std::move(c)), source_(std::move(source)) {}
  std::string backend() const override { return "modelopt"; }
  std::string scheme() const override { return c_.quant_algo; }
  nlohmann::json quantization_config() const override { return c_.raw; }
  bool should_quantize(const std::string& module, const Shape& shape) const override {
    return shape.size() == 2 && c_.algo_for(module).has_value();
  }
  std::shared_ptr<QuantizedWeight> quantize(const Tensor&) const override {
    fail(kCtx, "modelopt checkpoints are read, not made: quantize with NVIDIA ModelOpt and export_hf_checkpoint");
  }
  std::shared_ptr<QuantizedWeight> load(const io::StateDict& sd, const std::string& module, const Shape& shape,
                                        const io::Metadata*, std::vector<std::string>& consumed) const override {
    const auto algo = c_.algo_for(module);
    if (!algo) return nullptr;
    return load_modelopt_weight(sd, module, shape, *algo, source_, consumed);
  }
  void save(const QuantizedWeight& w, const std::string& module, io::StateDict&, io::Metadata&) const override {
    fail(kCtx, "modelopt weights are not written by diffq (", module, ", ", w.scheme(), ")");
  }

 private:
  ModelOptConfig c_;
  std::string source_;
};

}  // namespace

std::unique_ptr<QuantMethod> make_quant_method(const std::string& backend, const nlohmann::json& kwargs) {
  if (backend == "bitsandbytes_4bit" || backend == "bitsandbytes_8bit") {
    auto c = BitsAndBytesConfig::from_kwargs(kwargs);
    check(c.is_quantizable(), kCtx, backend, ": quant_kwargs must set ",
          backend == "bitsandbytes_4bit" ? "load_in_4bit" : "load_in_8bit", " to true");
    check((backend == "bitsandbytes_8bit") == c.load_in_8bit, kCtx, "quant_backend ", backend,
          " does not match the kwargs (load_in_4bit=", c.load_in_4bit, ", load_in_8bit=", c.load_in_8bit, ")");
    return std::make_unique<BnbMethod>(std::move(c));
  }
  if (backend == "torchao") return std::make_unique<TorchaoMethod>(torchao::Config::from_json(kwargs));
  if (backend == "quanto") return std::make_unique<QuantoMethod>(QuantoConfig::from_kwargs(kwargs));
  if (backend == "gguf") return std::make_unique<GgufMethod>(GGUFQuantizationConfig::from_json(kwargs));
  if (backend == "sdnq") return sdnq::make_sdnq_method(kwargs, /*pre_quantized=*/false);
  fail(kCtx, "unknown quantization backend '", backend, "' (diffq: bitsandbytes_4bit, bitsandbytes_8bit, torchao, quanto, gguf)");
}

std::unique_ptr<QuantMethod> quant_method_from_config(const nlohmann::json& qc, const std::string& source) {
  check(qc.is_object() && qc.contains("quant_method") && qc.at("quant_method").is_string(), kCtx, source,
        ": quantization_config has no \"quant_method\"");
  const std::string m = qc.at("quant_method").get<std::string>();
  if (m == "bitsandbytes") {
    auto c = BitsAndBytesConfig::from_kwargs(qc);
    return std::make_unique<BnbMethod>(std::move(c));
  }
  if (m == "torchao") return std::make_unique<TorchaoMethod>(torchao::Config::from_json(qc));
  if (m == "quanto") return std::make_unique<QuantoMethod>(QuantoConfig::from_kwargs(qc));
  if (m == "gguf") return std::make_unique<GgufMethod>(GGUFQuantizationConfig::from_json(qc));
  if (m == "nunchaku_lite") return std::make_unique<NunchakuMethod>(nunchaku::NunchakuLiteConfig::from_json(qc, source));
  if (m == "modelopt") return std::make_unique<ModelOptMethod>(ModelOptConfig::from_json(qc, source), source);
  if (m == "sdnq") return sdnq::make_sdnq_method(qc, /*pre_quantized=*/true);
  if (m == "auto-round" || m == "autoround") return autoround::make_autoround_method(qc, source);
  fail(kCtx, source, ": quant_method '", m,
       "' is not supported (bitsandbytes, torchao, quanto, gguf, nunchaku_lite, modelopt, sdnq, auto-round)");
}

const std::vector<std::string>& quant_shorthands() {
  static const std::vector<std::string> v = {
      "nf4",   "fp4",   "int8",  "int8wo", "int4wo", "int8dq", "fp8wo",  "fp8dq",  "quanto-int8", "quanto-int4",
      "quanto-int2", "quanto-fp8", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q2_K", "q3_K", "q4_K", "q5_K", "q6_K",
      "iq4_nl", "iq4_xs", "sdnq-int8", "sdnq-uint8", "sdnq-int4", "sdnq-uint4", "sdnq-int2", "sdnq-uint2",
      "sdnq-fp8", "sdnq-float8_e5m2"};
  return v;
}

std::pair<std::string, nlohmann::json> quant_shorthand(const std::string& name, const std::string& dtype) {
  using nlohmann::json;
  if (name == "nf4" || name == "fp4")
    return {"bitsandbytes_4bit",
            json{{"load_in_4bit", true}, {"bnb_4bit_quant_type", name}, {"bnb_4bit_compute_dtype", dtype}}};
  if (name == "int8") return {"bitsandbytes_8bit", json{{"load_in_8bit", true}}};
  if (name == "int8wo") return {"torchao", json{{"quant_type", "Int8WeightOnlyConfig"}}};
  if (name == "int4wo") return {"torchao", json{{"quant_type", "Int4WeightOnlyConfig"}}};
  if (name == "int8dq") return {"torchao", json{{"quant_type", "Int8DynamicActivationInt8WeightConfig"}}};
  if (name == "fp8wo") return {"torchao", json{{"quant_type", "Float8WeightOnlyConfig"}}};
  if (name == "fp8dq") return {"torchao", json{{"quant_type", "Float8DynamicActivationFloat8WeightConfig"}}};
  if (name.rfind("quanto-", 0) == 0) {
    std::string w = name.substr(7);
    if (w == "fp8") w = "float8";
    return {"quanto", json{{"weights_dtype", w}}};
  }
  if (name.rfind("sdnq-", 0) == 0) return sdnq::sdnq_shorthand(name);
  const auto& all = quant_shorthands();
  if (std::find(all.begin(), all.end(), name) != all.end() && name[0] != 'n')
    return {"gguf", json{{"type", name}, {"compute_dtype", dtype}}};
  std::string known;
  for (const auto& s : all) known += (known.empty() ? "" : ", ") + s;
  fail(kCtx, "unknown --quant '", name, "' (known: ", known, ")");
}

}  // namespace diffq::quant
