#include "modules/quantize_on_load.h"

#include <cmath>
#include <limits>
#include <map>

#include "diffq/error.h"

namespace diffq {

namespace {
bool is_linear_weight(const ParamRef& p) { return p.owner.type_name() == "Linear" && p.local == "weight"; }
}  // namespace

void attach_quantization(LoadOptions& opt, std::shared_ptr<const quant::QuantMethod> method, bool pre_quantized,
                         std::shared_ptr<const io::Metadata> metadata) {
  if (pre_quantized) {
    opt.load_quantized = [method, metadata](const ParamRef& p, const StateDict& sd,
                                            std::vector<std::string>& consumed) -> std::shared_ptr<QuantizedWeight> {
      if (!is_linear_weight(p)) return nullptr;
      return method->load(sd, p.module, p.shape, metadata.get(), consumed);
    };
  } else {
    // (load_state_dict already skips the model's keep_in_fp32 modules.)
    opt.quantize = [method](const ParamRef& p, const Tensor& value) -> std::shared_ptr<QuantizedWeight> {
      if (!is_linear_weight(p)) return nullptr;
      if (!method->should_quantize(p.module, value.shape())) return nullptr;
      return method->quantize_named(p.module, value);
    };
  }
}

int64_t quantize_module(Module& m, const quant::QuantMethod& method, const std::vector<std::string>& keep_in_fp32) {
  int64_t n = 0;
  for (const auto& [name, mod] : m.named_modules()) {
    if (mod->type_name() != "Linear" || module_name_matches(name, keep_in_fp32)) continue;
    for (const auto& [pn, p] : mod->own_parameters()) {
      if (pn != "weight" || !p->defined() || p->is_quantized()) continue;
      if (!method.should_quantize(name, p->shape())) continue;
      p->set(method.quantize_named(name, p->dense()), Residency::host);
      ++n;
    }
  }
  return n;
}

QuantizationSummary summarize_quantization(const Module& m) {
  QuantizationSummary s;
  for (const auto& [name, p] : m.named_parameters()) {
    if (!p->defined()) continue;
    if (p->is_quantized()) {
      ++s.quantized;
      s.quantized_bytes += p->nbytes();
    } else {
      s.dense_bytes += p->nbytes();
    }
  }
  for (const auto& [name, mod] : m.named_modules())
    if (mod->type_name() == "Linear")
      for (const auto& [pn, p] : mod->own_parameters())
        if (pn == "weight" && p->defined() && !p->is_quantized()) ++s.dense_linear;
  return s;
}

std::vector<LayerSqnr> weight_sqnr(const Module& quantized, const Module& reference) {
  std::map<std::string, const Parameter*> ref;
  for (const auto& [name, p] : reference.named_parameters()) ref[name] = p;
  std::vector<LayerSqnr> out;
  for (const auto& [name, p] : quantized.named_parameters()) {
    if (!p->is_quantized()) continue;
    const auto it = ref.find(name);
    check(it != ref.end() && it->second->defined() && !it->second->is_quantized(), "quant.report",
          "the reference model has no dense '", name, "'");
    check(it->second->shape() == p->shape(), "quant.report", "'", name, "' has shape ", shape_str(p->shape()),
          " but the reference's is ", shape_str(it->second->shape()));
    const auto w = it->second->dense().to_f32_vector();
    const auto d = p->quantized().dequantize(DType::f32).to_f32_vector();
    double sig = 0, noise = 0;
    for (size_t i = 0; i < w.size(); ++i) {
      sig += double(w[i]) * w[i];
      noise += (double(w[i]) - d[i]) * (double(w[i]) - d[i]);
    }
    const double db = noise == 0 ? std::numeric_limits<double>::infinity() : 10 * std::log10(sig / noise);
    out.push_back({name, p->quantized().scheme(), db});
  }
  return out;
}

LoadOptions quantized_file_load_options(const LoadOptions& opt, const std::string& file, const char* ctx) {
  LoadOptions o = opt;
  if (o.source.empty()) o.source = file;
  if (!o.dtype) o.dtype = DType::f32;
  const DType compute = *o.dtype;
  check(compute == DType::f32 || compute == DType::bf16 || compute == DType::f16, ctx, file,
        ": GGUF weights compute in float32, bfloat16 or float16, not ", dtype_name(compute));
  return o;
}

QuantizedBinder::QuantizedBinder(std::shared_ptr<const QuantizedByName> weights, LoadOptions& o)
    : weights_(std::move(weights)) {
  const auto previous = o.load_quantized;
  o.load_quantized = [w = weights_, bound = bound_, previous](const ParamRef& p, const StateDict& sd,
                                                              std::vector<std::string>& consumed)
      -> std::shared_ptr<QuantizedWeight> {
    if (auto it = w->find(p.full); it != w->end()) {
      bound->insert(p.full);
      return it->second;
    }
    return previous ? previous(p, sd, consumed) : nullptr;
  };
}

void QuantizedBinder::check_all_bound(const char* ctx, const std::string& file) const {
  for (const auto& [k, w] : *weights_)
    check(bound_->count(k), ctx, file, ": the quantized tensor for ", k, " matches no parameter of the model");
}

}  // namespace diffq
