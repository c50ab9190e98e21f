#include "models/flux/flux_single_file_gguf.h"

#include <set>

#include "diffq/error.h"
#include "io/gguf.h"
#include "models/flux/flux_keys.h"
#include "modules/quantize_on_load.h"
#include "quant/gguf/gguf_packed.h"
#include "quant/gguf/gguf_weight.h"

namespace diffq::models::flux {

namespace {
constexpr const char* kCtx = "flux-gguf";
using quant::gguf::GGMLType;
using quant::gguf::PackedTensor;

bool starts_with(const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; }

// The Diffusers-named pieces one BFL tensor becomes, still packed.
std::vector<std::pair<std::string, PackedTensor>> convert(const BflTensorMap& m, const PackedTensor& t,
                                                          const std::string& what) {
  std::vector<std::pair<std::string, PackedTensor>> out;
  switch (m.kind) {
    case BflTensorMap::Kind::same:
      out.push_back({m.parts[0].first, t});
      break;
    case BflTensorMap::Kind::split_rows: {
      int64_t total = 0;
      for (const auto& p : m.parts) total += p.second;
      check(!t.shape.empty() && t.shape[0] == total, kCtx, what, " has shape ", shape_str(t.shape), ", expected ",
            total, " rows");
      int64_t row = 0;
      for (const auto& [name, rows] : m.parts) {
        out.push_back({name, quant::gguf::packed_rows(t, row, row + rows, what)});
        row += rows;
      }
      break;
    }
    case BflTensorMap::Kind::swap_halves:
      out.push_back({m.parts[0].first, quant::gguf::packed_swap_halves(t, what)});
      break;
  }
  return out;
}
}  // namespace

std::unique_ptr<FluxTransformer2DModel> load_flux_gguf(const std::filesystem::path& file,
                                                       const FluxTransformerConfig& base, const LoadOptions& opt) {
  const auto gf = std::make_shared<io::GGUFFile>(io::GGUFFile::open(file));
  const std::string fname = file.string();
  ShapeMap shapes;
  bool prefixed = false;
  for (const auto& t : gf->tensors()) {
    shapes[t.name] = t.shape;
    prefixed = prefixed || starts_with(t.name, kBflPrefix);
  }
  check(is_bfl_flux_checkpoint(shapes), kCtx, fname,
        ": not a BFL/ComfyUI-named FLUX transformer (no double_blocks.0.img_attn.norm.key_norm.scale); diffq reads "
        "FLUX GGUF files in the naming of city96's FLUX.1-dev-gguf");
  const FluxTransformerConfig cfg = infer_bfl_flux_config(shapes, base);
  const std::string prefix = prefixed ? kBflPrefix : "";

  LoadOptions o = quantized_file_load_options(opt, fname, kCtx);
  const DType compute = *o.dtype;

  StateDict dense;
  auto quantized = std::make_shared<std::map<std::string, std::shared_ptr<QuantizedWeight>>>();
  std::set<std::string> used;
  for (const BflTensorMap& m : bfl_flux_tensor_map(cfg)) {
    const std::string name = prefix + m.bfl;
    const io::GGUFTensorInfo* info = gf->header().find_tensor(name);
    check(info != nullptr, kCtx, fname, " lacks the tensor ", name, " of a FLUX transformer with ", cfg.num_layers,
          " double and ", cfg.num_single_layers, " single blocks");
    used.insert(name);
    const std::string what = "tensor '" + name + "' in " + fname;
    quant::gguf::type_or_throw(info->type, what);  // a type diffq cannot dequantize is an error here
    const PackedTensor packed{info->type, info->shape, gf->raw_tensor(name)};
    for (auto& [key, part] : convert(m, packed, what)) {
      if (Tensor d = quant::gguf::packed_as_dense(part); d.defined()) {
        dense[key] = d;
      } else if (part.shape.size() == 2) {
        (*quantized)[key] = quant::GGUFQuantizedWeight::load(name + " -> " + key + " in " + fname, part.bytes, part.type, part.shape, compute);
      } else {
        dense[key] = quant::gguf::packed_dequantize(part, what);
      }
    }
  }
  std::string unknown;
  int n = 0;
  for (const auto& t : gf->tensors())
    if (!used.count(t.name) && (prefix.empty() || starts_with(t.name, prefix)) && n++ < 8)
      unknown += (unknown.empty() ? "" : ", ") + t.name;
  check(n == 0, kCtx, fname, ": ", n, " tensor(s) are not part of a FLUX transformer: ", unknown, n > 8 ? ", ..." : "");

  // Quantized weights are bound by name before the dense path (and before any quantize-on-load hook).
  QuantizedBinder binder(quantized, o);
  auto model = std::make_unique<FluxTransformer2DModel>(cfg);
  load_state_dict(*model, dense, o);
  binder.check_all_bound(kCtx, fname);
  return model;
}

}  // namespace diffq::models::flux
