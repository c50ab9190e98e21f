#include "quant/bfl/bfl_layers.h"

#include "diffq/error.h"
#include "quant/bfl/fp8_scaled_weight.h"
#include "quant/bfl/nvfp4_weight.h"

namespace diffq::quant {

namespace {
constexpr const char* kCtx = "bfl";

bool ends_with(const std::string& s, const std::string& t) {
  return s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0;
}
}  // namespace

bool has_bfl_quantized_layers(const StateDict& sd) {
  for (const auto& [k, v] : sd)
    if (ends_with(k, ".weight_scale")) return true;
  return false;
}

BflQuantizedLayers read_bfl_quantized_layers(const StateDict& sd, const std::string& file) {
  BflQuantizedLayers out;
  for (const auto& [key, scale] : sd) {
    if (!ends_with(key, ".weight_scale")) continue;
    const std::string p = key.substr(0, key.size() - std::string(".weight_scale").size());
    const auto wit = sd.find(p + ".weight");
    check(wit != sd.end(), kCtx, file, ": ", key, " has no ", p, ".weight");
    const Tensor& w = wit->second;
    const auto s2 = sd.find(p + ".weight_scale_2");
    const auto is = sd.find(p + ".input_scale");
    const bool nvfp4 = s2 != sd.end();
    const std::string what = p + ".weight in " + file;
    std::shared_ptr<ScaledWeight> q;
    if (nvfp4) {
      check(w.dtype() == DType::u8, kCtx, file, ": ", p, ".weight is ", dtype_name(w.dtype()),
            ", but the nvfp4 layout (", p, ".weight_scale_2 is present) expects uint8");
      check(is != sd.end(), kCtx, file, ": ", p, " has weight_scale_2 but no ", p, ".input_scale, which the nvfp4 layout requires");
      q = std::make_shared<Nvfp4Weight>(w, scale, s2->second, "bfl_nvfp4", what);
      ++out.nvfp4;
    } else {
      check(w.dtype() == DType::f8_e4m3fn, kCtx, file, ": ", p, ".weight is ", dtype_name(w.dtype()),
            ", but the fp8r layout (", p, ".weight_scale without weight_scale_2) expects float8_e4m3fn");
      auto f = std::make_shared<Fp8ScaledWeight>(w, scale, "bfl_fp8r", what);
      check(f->per_row(), kCtx, file, ": ", key, " has shape ", shape_str(scale.shape()), ", fp8r expects one scale per row [",
            w.size(0), "]");
      q = f;
      ++out.fp8r;
    }
    if (is != sd.end()) {
      check(is->second.numel() == 1, kCtx, file, ": ", p, ".input_scale must be one value, got ", is->second.str());
      q->set_input_scale(is->second.to(DType::f32));
      out.consumed.insert(p + ".input_scale");
    }
    out.weights[p] = q;
    for (const char* s : {".weight", ".weight_scale"}) out.consumed.insert(p + s);
    if (nvfp4) out.consumed.insert(p + ".weight_scale_2");
  }
  for (const auto& [key, t] : sd) {
    if (out.consumed.count(key)) continue;
    check(!ends_with(key, ".weight_scale_2") && !ends_with(key, ".input_scale"), kCtx, file, ": ", key,
          " belongs to no quantized layer (no matching .weight_scale)");
    if (!out.weights.empty())
      check(t.dtype() != DType::f8_e4m3fn && t.dtype() != DType::f8_e5m2 && t.dtype() != DType::u8, kCtx, file, ": ", key,
            " is ", dtype_name(t.dtype()), " without a .weight_scale, in a file whose other layers are fp8r/nvfp4 (a mixed "
            "or malformed file: its codes have no scale)");
  }
  return out;
}

}  // namespace diffq::quant
