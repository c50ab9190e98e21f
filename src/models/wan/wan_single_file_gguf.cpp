#include "models/wan/wan_single_file_gguf.h"

#include <algorithm>
#include <set>

#include "diffq/error.h"
#include "io/gguf.h"
#include "models/wan/wan_keys.h"
#include "modules/quantize_on_load.h"
#include "quant/gguf/gguf_packed.h"
#include "quant/gguf/gguf_weight.h"

namespace diffq::models::wan {

namespace {
constexpr const char* kCtx = "wan-gguf";

bool ends_with(const std::string& s, const std::string& e) {
  return s.size() >= e.size() && s.compare(s.size() - e.size(), e.size(), e) == 0;
}

// ComfyUI-GGUF's "comfy.gguf.orig_shape.<tensor>" (an int32 array): the shape before the converter
// flattened the tensor.
std::optional<Shape> orig_shape(const io::GGUFFile& gf, const std::string& tensor, const std::string& fname) {
  const io::GGUFValue* v = gf.find("comfy.gguf.orig_shape." + tensor);
  if (!v) return std::nullopt;
  check(v->type == io::GGUFValueType::array && v->elem_type == io::GGUFValueType::int32, kCtx, fname,
        ": comfy.gguf.orig_shape.", tensor, " is not an int32 array");
  Shape s;
  for (uint64_t k = 0; k < v->count; ++k) s.push_back(v->int_at(k));
  return s;
}
}  // namespace

std::unique_ptr<WanTransformer3DModel> load_wan_gguf(const std::filesystem::path& file,
                                                     const std::optional<WanTransformerConfig>& base,
                                                     const LoadOptions& opt) {
  const auto gf = std::make_shared<io::GGUFFile>(io::GGUFFile::open(file));
  const std::string fname = file.string();
  WanShapeMap shapes;
  for (const auto& t : gf->tensors()) shapes[t.name] = t.shape;
  const WanCheckpointKind kind = classify_wan_checkpoint(shapes, fname);

  LoadOptions o = quantized_file_load_options(opt, fname, kCtx);
  const DType compute = *o.dtype;

  // Diffusers' GGUF quantizer dequantizes the quantized weights of _keep_in_fp32_modules (time_embedder)
  // to float32 at load time instead of wrapping them in GGUFLinear.
  const auto fp32_modules = WanTransformer3DModel::keep_in_fp32_modules();
  const auto keep_fp32 = [&](const std::string& key) {
    size_t start = 0;
    while (start <= key.size()) {
      const size_t dot = std::min(key.find('.', start), key.size());
      if (std::find(fp32_modules.begin(), fp32_modules.end(), key.substr(start, dot - start)) != fp32_modules.end())
        return true;
      start = dot + 1;
    }
    return false;
  };
  StateDict dense;
  WanShapeMap diffusers_shapes;
  auto quantized = std::make_shared<std::map<std::string, std::shared_ptr<QuantizedWeight>>>();
  std::string unknown;
  int n_unknown = 0;
  for (const auto& info : gf->tensors()) {
    if (!kind.prefix.empty() && info.name.compare(0, kind.prefix.size(), kind.prefix) != 0) continue;
    const std::string k = info.name.substr(kind.prefix.size());
    std::string key = k;
    if (kind.naming == WanNaming::original) {
      const auto d = wan_original_to_diffusers_name(k);
      if (!d) {
        if (n_unknown++ < 8) unknown += (unknown.empty() ? "" : ", ") + info.name;
        continue;
      }
      key = *d;
    }
    const std::string what = "tensor '" + info.name + "' in " + fname;
    quant::gguf::type_or_throw(info.type, what);  // a type diffq cannot dequantize is an error here
    const quant::gguf::PackedTensor packed{info.type, info.shape, gf->raw_tensor(info.name)};
    Shape want = orig_shape(*gf, info.name, fname).value_or(info.shape);
    if (ends_with(key, "scale_shift_table") && want.size() == 2) want.insert(want.begin(), 1);  // [6, D] -> [1, 6, D]
    check(shape_numel(want) == shape_numel(info.shape), kCtx, what, ": stored shape ", shape_str(info.shape),
          " and original shape ", shape_str(want), " differ in size");
    diffusers_shapes[key] = want;
    if (Tensor d = quant::gguf::packed_as_dense(packed); d.defined()) {
      dense[key] = want == info.shape ? d : d.reshape(want);
    } else if (info.shape.size() == 2 && want == info.shape && !keep_fp32(key)) {
      (*quantized)[key] = quant::GGUFQuantizedWeight::load(info.name + " -> " + key + " in " + fname, packed.bytes,
                                                           packed.type, packed.shape, compute);
    } else {
      dense[key] = quant::gguf::packed_dequantize(packed, what).reshape(want);
    }
  }
  check(n_unknown == 0, kCtx, fname, ": ", n_unknown, " tensor(s) are not part of a text-to-video Wan transformer: ",
        unknown, n_unknown > 8 ? ", ..." : "");
  const WanTransformerConfig cfg = infer_wan_config_from_shapes(diffusers_shapes, base, fname);

  // Quantized weights are bound by name before the dense path (and before any quantize-on-load hook).
  QuantizedBinder binder(quantized, o);
  auto model = WanTransformer3DModel::from_state_dict(cfg, dense, o);
  binder.check_all_bound(kCtx, fname);
  return model;
}

}  // namespace diffq::models::wan
