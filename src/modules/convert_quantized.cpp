#include "modules/convert_quantized.h"

#include "diffq/error.h"
#include "modules/state_dict.h"
#include "quant/dense_equivalent.h"

namespace diffq {

ConvertReport convert_quantized_module(Module& m, const quant::QuantMethod* target, DType dtype,
                                       const std::set<const QuantizedWeight*>& keep,
                                       const std::vector<std::string>& keep_in_fp32) {
  ConvertReport rep;
  for (const auto& [name, mod] : m.named_modules()) {
    Parameter* weight = nullptr;
    Parameter* bias = nullptr;
    for (const auto& [pn, p] : mod->own_parameters()) {
      if (pn == "weight") weight = p;
      if (pn == "bias") bias = p;
    }
    for (const auto& [pn, p] : mod->own_parameters()) {
      if (!p->defined() || !p->is_quantized() || keep.count(&p->quantized())) continue;
      const std::string full = name.empty() ? pn : name + "." + pn;
      const std::shared_ptr<const QuantizedWeight> src = p->quantized_ptr();  // alive until the end of this step
      rep.source_schemes.insert(src->scheme());
      const bool linear_weight = mod->type_name() == "Linear" && p == weight;
      const bool fp32 = module_name_matches(full, keep_in_fp32);
      const DType dt = fp32 ? DType::f32 : dtype;
      Tensor dense = linear_weight ? quant::dense_equivalent(*src, dt) : src->dequantize(dt);
      check(dense.shape() == p->shape(), "convert", full, ": the dequantized weight has shape ", shape_str(dense.shape()),
            ", the parameter ", shape_str(p->shape()));
      if (linear_weight && bias && bias->defined() && !bias->is_quantized()) {
        const Tensor b = quant::dense_equivalent_bias(*src, bias->dense());
        if (b.data_ptr() != bias->dense().data_ptr()) bias->set(b, Residency::host);
      }
      if (linear_weight && target && !fp32 &&
          target->should_quantize(name, dense.shape())) {
        p->set(target->quantize_named(name, dense), Residency::host);
        ++rep.requantized;
      } else {
        p->set(dense, Residency::host);
        ++rep.dequantized;
      }
    }
  }
  return rep;
}

}  // namespace diffq
