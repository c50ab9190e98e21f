#include "models/flux/flux_single_file_bfl_quant.h"

#include <set>

#include "diffq/error.h"
#include "models/flux/flux_keys.h"
#include "modules/quantize_on_load.h"
#include "ops/ops.h"
#include "quant/bfl/bfl_layers.h"
#include "quant/bfl/fp8_scaled_weight.h"
#include "quant/bfl/nvfp4_weight.h"

namespace diffq::models::flux {

namespace {
constexpr const char* kCtx = "flux-bfl-quant";

bool starts_with(const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; }

std::shared_ptr<QuantizedWeight> rows_of(const quant::ScaledWeight& w, const quant::RowRanges& r, const std::string& what) {
  if (const auto* f = dynamic_cast<const quant::Fp8ScaledWeight*>(&w)) return f->rows(r, what);
  if (const auto* n = dynamic_cast<const quant::Nvfp4Weight*>(&w)) return n->rows(r, what);
  fail(kCtx, what, ": ", w.scheme(), " cannot be split");
}
}  // namespace

std::unique_ptr<FluxTransformer2DModel> load_flux_bfl_quantized(const StateDict& sd, const std::string& file,
                                                                const FluxTransformerConfig& base,
                                                                const LoadOptions& opt) {
  const quant::BflQuantizedLayers q = quant::read_bfl_quantized_layers(sd, file);
  // Shapes as the config inference sees them: logical [N, K] for quantized weights, no scale tensors.
  ShapeMap shapes;
  bool prefixed = false;
  for (const auto& [k, t] : sd) {
    prefixed = prefixed || starts_with(k, kBflPrefix);
    if (!q.consumed.count(k)) shapes[k] = t.shape();
  }
  for (const auto& [p, w] : q.weights) shapes[p + ".weight"] = w->shape();
  check(is_bfl_flux_checkpoint(shapes), kCtx, file,
        ": has fp8r/nvfp4 layers (.weight_scale) but is not a BFL-named FLUX transformer "
        "(no double_blocks.0.img_attn.norm.key_norm.scale)");
  const FluxTransformerConfig cfg = infer_bfl_flux_config(shapes, base);
  const std::string prefix = prefixed ? kBflPrefix : "";
  LoadOptions o = quantized_file_load_options(opt, file, kCtx);

  StateDict dense;
  auto quantized = std::make_shared<QuantizedByName>();
  std::set<std::string> used;
  for (const BflTensorMap& m : bfl_flux_tensor_map(cfg)) {
    const std::string name = prefix + m.bfl;
    const std::string what = name + " in " + file;
    used.insert(name);
    const bool is_q = m.bfl.size() > 7 && m.bfl.compare(m.bfl.size() - 7, 7, ".weight") == 0 &&
                      q.weights.count(name.substr(0, name.size() - 7));
    if (is_q) {
      const quant::ScaledWeight& w = *q.weights.at(name.substr(0, name.size() - 7));
      const int64_t n = w.shape()[0];
      switch (m.kind) {
        case BflTensorMap::Kind::same:
          (*quantized)[m.parts[0].first] = q.weights.at(name.substr(0, name.size() - 7));
          break;
        case BflTensorMap::Kind::split_rows: {
          int64_t row = 0;
          for (const auto& [key, rows] : m.parts) {
            (*quantized)[key] = rows_of(w, {{row, row + rows}}, what);
            row += rows;
          }
          check(row == n, kCtx, what, " has ", n, " rows, expected ", row);
          break;
        }
        case BflTensorMap::Kind::swap_halves:  // BFL (shift, scale) -> Diffusers (scale, shift)
          check(n % 2 == 0, kCtx, what, " has an odd row count ", n);
          (*quantized)[m.parts[0].first] = rows_of(w, {{n / 2, n}, {0, n / 2}}, what);
          break;
      }
      continue;
    }
    auto it = sd.find(name);
    check(it != sd.end(), kCtx, file, " lacks ", name);
    const Tensor& t = it->second;
    switch (m.kind) {
      case BflTensorMap::Kind::same:
        dense[m.parts[0].first] = t;
        break;
      case BflTensorMap::Kind::split_rows: {
        int64_t row = 0;
        for (const auto& [key, rows] : m.parts) {
          check(t.dim() >= 1 && row + rows <= t.size(0), kCtx, what, " has shape ", shape_str(t.shape()));
          dense[key] = t.slice(0, row, row + rows);
          row += rows;
        }
        break;
      }
      case BflTensorMap::Kind::swap_halves: {
        const int64_t h = t.size(0) / 2;
        dense[m.parts[0].first] = ops::concat({t.slice(0, h, 2 * h), t.slice(0, 0, h)}, 0);
        break;
      }
    }
  }
  std::string unknown;
  int n = 0;
  for (const auto& [k, t] : sd)
    if (!used.count(k) && !q.consumed.count(k) && (prefix.empty() || starts_with(k, prefix)) && n++ < 8)
      unknown += (unknown.empty() ? "" : ", ") + k;
  check(n == 0, kCtx, file, ": ", n, " tensor(s) are not part of a FLUX transformer: ", unknown, n > 8 ? ", ..." : "");

  QuantizedBinder binder(quantized, o);
  auto model = std::make_unique<FluxTransformer2DModel>(cfg);
  load_state_dict(*model, dense, o);
  binder.check_all_bound(kCtx, file);
  return model;
}

}  // namespace diffq::models::flux
