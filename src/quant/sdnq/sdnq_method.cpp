#include "quant/sdnq/sdnq_method.h"

#include <mutex>
#include <set>

#include "diffq/error.h"
#include "quant/sdnq/sdnq_config.h"
#include "quant/sdnq/sdnq_weight.h"

namespace diffq::quant::sdnq {

namespace {

class SdnqMethod final : public QuantMethod {
 public:
  explicit SdnqMethod(SdnqConfig c) : c_(std::move(c)) {}
  std::string backend() const override { return "sdnq"; }
  std::string scheme() const override { return "sdnq_" + c_.weights_dtype; }
  nlohmann::json quantization_config() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return c_.to_json(std::vector<std::string>(dense_.begin(), dense_.end()));
  }
  bool should_quantize(const std::string& module, const Shape& shape) const override {
    const bool q = c_.should_quantize(module, shape);
    if (!q) {  // recorded as the library does, so a saved config lists every dense Linear
      std::lock_guard<std::mutex> lock(mu_);
      dense_.insert(module + ".weight");
    }
    return q;
  }
  std::shared_ptr<QuantizedWeight> quantize(const Tensor& w) const override { return quantize_named("", w); }
  std::shared_ptr<QuantizedWeight> quantize_named(const std::string& module, const Tensor& w) const override {
    const SdnqDtype& d = c_.dtype_for(module);
    // dequantize_fp32 off: scales in the weight dtype where the code range allows (sdnq's cast_scale)
    const DType sdt = (!c_.dequantize_fp32 && d.max <= 16384) ? w.dtype() : DType::f32;
    return SdnqWeight::quantize(w, d, c_.group_size, sdt);
  }
  std::shared_ptr<QuantizedWeight> load(const io::StateDict& sd, const std::string& module, const Shape& shape,
                                        const io::Metadata*, std::vector<std::string>& consumed) const override {
    return SdnqWeight::load(sd, module, shape, c_.dtype_for(module), consumed);
  }
  void save(const QuantizedWeight& w, const std::string& module, io::StateDict& out, io::Metadata&) const override {
    const auto* p = dynamic_cast<const SdnqWeight*>(&w);
    check(p != nullptr, "quant", "sdnq cannot save a ", w.scheme(), " weight");
    p->save(out, module);
  }

 private:
  SdnqConfig c_;
  mutable std::mutex mu_;
  mutable std::set<std::string> dense_;
};

}  // namespace

std::unique_ptr<QuantMethod> make_sdnq_method(const nlohmann::json& config, bool pre_quantized) {
  return std::make_unique<SdnqMethod>(SdnqConfig::from_json(config, pre_quantized));
}

std::pair<std::string, nlohmann::json> sdnq_shorthand(const std::string& name) {
  std::string d = name.substr(5);
  if (d == "fp8") d = "float8_e4m3fn";
  sdnq_dtype(d, "--quant sdnq-<weights_dtype>");  // throws naming the value
  return {"sdnq", nlohmann::json{{"weights_dtype", d}}};
}

}  // namespace diffq::quant::sdnq
