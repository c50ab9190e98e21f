// save_flux_gguf / flux_gguf_tensor_type (flux_single_file_gguf.h): the Diffusers-named model written
// back in BFL naming, read through flux_keys' table in reverse.
#include <map>
#include <set>

#include "diffq/error.h"
#include "io/gguf_writer.h"
#include "models/flux/flux_keys.h"
#include "models/flux/flux_single_file_gguf.h"
#include "quant/gguf/gguf_packed.h"
#include "quant/dense_equivalent.h"
#include "quant/gguf/gguf_weight.h"

namespace diffq::models::flux {

namespace {
constexpr const char* kCtx = "flux-gguf";
using quant::gguf::GGMLType;
using quant::gguf::PackedTensor;

// city96's QUANTIZATION_THRESHOLD: smaller tensors are kept in F32.
constexpr int64_t kSmallTensor = 1024;

// One Diffusers parameter as `type` bytes: a GGUF weight of that type as it is, any other quantized weight
// through its float32 dense equivalent (quant/dense_equivalent.h: ModelOpt's pre_quant_scale and Nunchaku's
// low-rank branch folded in), a dense one as it is. `owner`: the quantized weight of the Linear whose bias
// `p` is (a packed Nunchaku layer's bias is un-permuted), else null.
PackedTensor pack(const Parameter& p, const QuantizedWeight* owner, GGMLType type, const std::string& what) {
  if (p.is_quantized()) {
    if (const auto* g = dynamic_cast<const quant::GGUFQuantizedWeight*>(&p.quantized()); g && g->type() == type)
      return PackedTensor{uint32_t(type), g->shape(), g->data()};
    return quant::gguf::packed_quantize(quant::dense_equivalent(p.quantized(), DType::f32), type, what);
  }
  if (owner) return quant::gguf::packed_quantize(quant::dense_equivalent_bias(*owner, p.dense()), type, what);
  return quant::gguf::packed_quantize(p.dense(), type, what);
}
}  // namespace

GGMLType flux_gguf_tensor_type(const Shape& shape, GGMLType type) {
  const quant::gguf::TypeTraits* t = quant::gguf::find_type(type);
  check(t != nullptr, kCtx, "ggml type ", uint32_t(type), " is not supported");
  if (shape.size() <= 1 || shape_numel(shape) <= kSmallTensor) return GGMLType::F32;
  if (shape.back() % t->block_size() != 0) return GGMLType::F16;
  return type;
}

FluxGGUFWriteReport save_flux_gguf(const FluxTransformer2DModel& model, const std::filesystem::path& path,
                                   GGMLType type, const std::string& name) {
  std::map<std::string, const Parameter*> params;
  for (const auto& [k, p] : model.named_parameters()) params[k] = p;
  std::map<const Parameter*, const QuantizedWeight*> bias_owner;  // Linear bias -> its quantized weight
  for (const auto& [name, mod] : model.named_modules()) {
    const Parameter *w = nullptr, *b = nullptr;
    for (const auto& [pn, p] : mod->own_parameters()) {
      if (pn == "weight") w = p;
      if (pn == "bias") b = p;
    }
    if (w && b && w->is_quantized() && b->defined() && !b->is_quantized()) bias_owner[b] = &w->quantized();
  }
  std::vector<io::GGUFWriteTensor> tensors;
  FluxGGUFWriteReport rep;
  std::set<std::string> used;
  for (const BflTensorMap& m : bfl_flux_tensor_map(model.config)) {
    std::vector<const Parameter*> parts;
    for (const auto& [key, rows] : m.parts) {
      auto it = params.find(key);
      check(it != params.end() && it->second->defined(), kCtx, "the model has no loaded parameter ", key, " (for ", m.bfl, ")");
      parts.push_back(it->second);
      used.insert(key);
    }
    Shape shape = parts[0]->shape();
    for (size_t i = 1; i < parts.size(); ++i) shape[0] += parts[i]->shape()[0];
    const GGMLType tt = flux_gguf_tensor_type(shape, type);
    const std::string what = m.bfl + " (" + m.parts[0].first + (parts.size() > 1 ? ", ..." : "") + ")";
    std::vector<PackedTensor> packed;
    for (const Parameter* p : parts) {
      const auto o = bias_owner.find(p);
      packed.push_back(pack(*p, o == bias_owner.end() ? nullptr : o->second, tt, what));
    }
    PackedTensor t = packed.size() == 1 ? packed[0] : quant::gguf::packed_concat(packed, what);
    if (m.kind == BflTensorMap::Kind::swap_halves) t = quant::gguf::packed_swap_halves(t, what);  // its own inverse
    ++rep.tensors_per_type[std::string(quant::gguf::find_type(tt)->name())];
    tensors.push_back(io::GGUFWriteTensor{m.bfl, t.type, t.shape, t.bytes});
  }
  for (const auto& [k, p] : params)
    check(used.count(k) || !p->defined(), kCtx, "parameter ", k, " has no BFL name; cannot write ", path.string());
  io::GGUFMetadata md = {{"general.architecture", io::gguf_string("flux")},
                         {"general.name", io::gguf_string(name)},
                         {"general.quantization_version", io::gguf_u32(2)}};
  io::write_gguf(path, md, tensors);
  rep.tensors = int64_t(tensors.size());
  rep.file_bytes = std::filesystem::file_size(path);
  return rep;
}

}  // namespace diffq::models::flux
