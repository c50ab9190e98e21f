#include "pipelines/component_loading.h"

#include <cstdio>
#include <map>

#include "modules/convert_quantized.h"
#include "modules/quantize_on_load.h"

namespace diffq {

ComponentLoader::ComponentLoader(const io::DiffusersFolder& f, std::optional<DType> d,
                                 std::optional<PipelineQuantizationConfig> q, bool convert)
    : folder(f), dtype(d), quantization_config(std::move(q)), convert_pre_quantized(convert) {
  if (!quantization_config) return;
  std::vector<std::string> names;
  for (const auto& c : folder.components()) names.push_back(c.name);
  if (const std::string w = quantization_config->unknown_components_warning(names); !w.empty())
    std::fprintf(stderr, "diffq: %s\n", w.c_str());
}

std::string quantized_schemes_summary(const Module& m) {
  std::map<std::string, int> counts;
  for (const auto& [name, prm] : m.named_parameters())
    if (prm->is_quantized()) ++counts[prm->quantized().scheme()];
  std::string out;
  for (const auto& [scheme, n] : counts) out += (out.empty() ? "" : ", ") + scheme + " x" + std::to_string(n);
  return out;
}

LoadOptions ComponentLoader::hooks_for(const std::string& name, bool from_folder) {
  LoadOptions h;
  h.dtype = dtype;
  const bool present = from_folder && folder.has_component(name);
  const nlohmann::json* saved = present ? folder.component(name).quantization_config() : nullptr;
  const auto target_cfg = quantization_config ? quantization_config->resolve(name) : std::nullopt;
  if (convert_pre_quantized && target_cfg && (saved || !from_folder)) {
    // Conversion: the saved layout loads as saved, dense Linears are quantized at load by the target (and
    // remembered), finish() converts the rest.
    std::shared_ptr<const quant::QuantMethod> target = quant::make_quant_method(target_cfg->backend, target_cfg->kwargs);
    Conversion c{target, std::make_shared<std::set<const QuantizedWeight*>>(), ""};
    if (saved) {
      std::shared_ptr<const quant::QuantMethod> src =
          quant::quant_method_from_config(*saved, (folder.component(name).dir / "config.json").string());
      auto md = std::make_shared<io::Metadata>(io::load_weight_metadata(folder.weight_files(name)));
      attach_quantization(h, src, /*pre_quantized=*/true, md);
      c.source = src->backend() + " " + src->scheme();
    }
    attach_quantization(h, target, /*pre_quantized=*/false);
    h.quantize = [inner = h.quantize, produced = c.produced](const ParamRef& p, const Tensor& v) {
      auto q = inner(p, v);
      if (q) produced->insert(q.get());
      return q;
    };
    quantization[name] = target->backend() + " " + target->scheme();
    quant_methods[name] = target;
    conversions_[name] = std::move(c);
    return h;
  }
  if (saved) {
    std::shared_ptr<const quant::QuantMethod> m =
        quant::quant_method_from_config(*saved, (folder.component(name).dir / "config.json").string());
    // safetensors headers, or the torchao metadata of a .bin checkpoint's flattened subclasses
    auto md = std::make_shared<io::Metadata>(io::load_weight_metadata(folder.weight_files(name)));
    attach_quantization(h, m, /*pre_quantized=*/true, md);
    quantization[name] = m->backend() + " " + m->scheme() + " (pre-quantized)";
    quant_methods[name] = m;
    if (quantization_config && quantization_config->resolve(name))
      std::fprintf(stderr, "diffq: %s is already quantized (%s); the quantization config is ignored for it\n",
                   name.c_str(), m->backend().c_str());
  } else if (quantization_config) {
    if (auto cq = quantization_config->resolve(name)) {
      std::shared_ptr<const quant::QuantMethod> m = quant::make_quant_method(cq->backend, cq->kwargs);
      attach_quantization(h, m, /*pre_quantized=*/false);
      quantization[name] = m->backend() + " " + m->scheme();
      quant_methods[name] = m;
    }
  }
  return h;
}

void ComponentLoader::finish(const std::string& name, Module& m, const std::vector<std::string>& keep_in_fp32) {
  const auto it = conversions_.find(name);
  if (it == conversions_.end()) return;
  const Conversion& c = it->second;
  const ConvertReport r = convert_quantized_module(m, c.target.get(), dtype.value_or(DType::f32), *c.produced, keep_in_fp32);
  if (r.requantized + r.dequantized == 0 && c.source.empty()) return;  // a dense single file: nothing to convert
  std::string from = c.source;
  if (from.empty()) {  // a single file's own schemes, less those the target produced at load
    for (const auto& s : r.source_schemes) from += (from.empty() ? "" : ", ") + s;
  }
  converted_from[name] = from;
  quantization[name] += " (converted from " + from + ")";
}

}  // namespace diffq
