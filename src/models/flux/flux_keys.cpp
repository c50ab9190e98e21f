#include "models/flux/flux_keys.h"

#include <set>

#include "diffq/error.h"
#include "ops/ops.h"

namespace diffq::models::flux {

namespace {

constexpr const char* kDetectKey = "double_blocks.0.img_attn.norm.key_norm.scale";

bool starts_with(const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; }

// The transformer's keys with the prefix stripped (others dropped when any key carries the prefix).
template <class Map>
Map strip_prefix(const Map& sd) {
  bool prefixed = false;
  for (const auto& [k, v] : sd) prefixed = prefixed || starts_with(k, kBflPrefix);
  if (!prefixed) return sd;
  Map out;
  const size_t n = std::string(kBflPrefix).size();
  for (const auto& [k, v] : sd)
    if (starts_with(k, kBflPrefix)) out[k.substr(n)] = v;
  return out;
}

ShapeMap shapes_of(const StateDict& sd) {
  ShapeMap m;
  for (const auto& [k, v] : sd) m[k] = v.shape();
  return m;
}

// Highest "<group>.<i>." index + 1.
int64_t count_blocks(const ShapeMap& sd, const std::string& group) {
  int64_t n = 0;
  const std::string p = group + ".";
  for (const auto& [k, v] : sd) {
    if (!starts_with(k, p)) continue;
    const size_t dot = k.find('.', p.size());
    const std::string idx = k.substr(p.size(), dot - p.size());
    check(!idx.empty() && idx.find_first_not_of("0123456789") == std::string::npos, "flux-keys", "key ", k,
          " has no block index");
    n = std::max<int64_t>(n, std::stoll(idx) + 1);
  }
  return n;
}

// Builds the table: a module's weight and bias share one rule.
class MapBuilder {
 public:
  void rename(const std::string& from, const std::string& to) {
    for (const char* s : {".weight", ".bias"}) add(from + s, BflTensorMap::Kind::same, {{to + s, 0}});
  }
  void split_rows(const std::string& from, const std::vector<std::pair<std::string, int64_t>>& parts) {
    for (const char* s : {".weight", ".bias"}) {
      std::vector<std::pair<std::string, int64_t>> p;
      for (const auto& [name, rows] : parts) p.push_back({name + s, rows});
      add(from + s, BflTensorMap::Kind::split_rows, std::move(p));
    }
  }
  void swap_halves(const std::string& from, const std::string& to) {
    for (const char* s : {".weight", ".bias"}) add(from + s, BflTensorMap::Kind::swap_halves, {{to + s, 0}});
  }
  void scale(const std::string& from, const std::string& to) {
    add(from + ".scale", BflTensorMap::Kind::same, {{to + ".weight", 0}});
  }
  std::vector<BflTensorMap> out;

 private:
  void add(std::string bfl, BflTensorMap::Kind k, std::vector<std::pair<std::string, int64_t>> parts) {
    out.push_back(BflTensorMap{std::move(bfl), k, std::move(parts)});
  }
};

}  // namespace

std::vector<BflTensorMap> bfl_flux_tensor_map(const FluxTransformerConfig& cfg) {
  const int64_t D = cfg.inner_dim(), M = cfg.mlp_hidden_dim();
  MapBuilder c;
  c.rename("time_in.in_layer", "time_text_embed.timestep_embedder.linear_1");
  c.rename("time_in.out_layer", "time_text_embed.timestep_embedder.linear_2");
  c.rename("vector_in.in_layer", "time_text_embed.text_embedder.linear_1");
  c.rename("vector_in.out_layer", "time_text_embed.text_embedder.linear_2");
  if (cfg.guidance_embeds) {
    c.rename("guidance_in.in_layer", "time_text_embed.guidance_embedder.linear_1");
    c.rename("guidance_in.out_layer", "time_text_embed.guidance_embedder.linear_2");
  }
  c.rename("txt_in", "context_embedder");
  c.rename("img_in", "x_embedder");

  for (int64_t i = 0; i < cfg.num_layers; ++i) {
    const std::string b = "double_blocks." + std::to_string(i) + ".";
    const std::string t = "transformer_blocks." + std::to_string(i) + ".";
    c.rename(b + "img_mod.lin", t + "norm1.linear");
    c.rename(b + "txt_mod.lin", t + "norm1_context.linear");
    c.split_rows(b + "img_attn.qkv", {{t + "attn.to_q", D}, {t + "attn.to_k", D}, {t + "attn.to_v", D}});
    c.split_rows(b + "txt_attn.qkv", {{t + "attn.add_q_proj", D}, {t + "attn.add_k_proj", D}, {t + "attn.add_v_proj", D}});
    c.scale(b + "img_attn.norm.query_norm", t + "attn.norm_q");
    c.scale(b + "img_attn.norm.key_norm", t + "attn.norm_k");
    c.scale(b + "txt_attn.norm.query_norm", t + "attn.norm_added_q");
    c.scale(b + "txt_attn.norm.key_norm", t + "attn.norm_added_k");
    c.rename(b + "img_mlp.0", t + "ff.net.0.proj");
    c.rename(b + "img_mlp.2", t + "ff.net.2");
    c.rename(b + "txt_mlp.0", t + "ff_context.net.0.proj");
    c.rename(b + "txt_mlp.2", t + "ff_context.net.2");
    c.rename(b + "img_attn.proj", t + "attn.to_out.0");
    c.rename(b + "txt_attn.proj", t + "attn.to_add_out");
  }
  for (int64_t i = 0; i < cfg.num_single_layers; ++i) {
    const std::string b = "single_blocks." + std::to_string(i) + ".";
    const std::string t = "single_transformer_blocks." + std::to_string(i) + ".";
    c.rename(b + "modulation.lin", t + "norm.linear");
    c.split_rows(b + "linear1", {{t + "attn.to_q", D}, {t + "attn.to_k", D}, {t + "attn.to_v", D}, {t + "proj_mlp", M}});
    c.scale(b + "norm.query_norm", t + "attn.norm_q");
    c.scale(b + "norm.key_norm", t + "attn.norm_k");
    c.rename(b + "linear2", t + "proj_out");
  }
  c.rename("final_layer.linear", "proj_out");
  c.swap_halves("final_layer.adaLN_modulation.1", "norm_out.linear");
  return std::move(c.out);
}

bool is_bfl_flux_checkpoint(const ShapeMap& shapes) {
  return shapes.count(kDetectKey) || shapes.count(std::string(kBflPrefix) + kDetectKey);
}

bool is_bfl_flux_state_dict(const StateDict& sd) {
  return sd.count(kDetectKey) || sd.count(std::string(kBflPrefix) + kDetectKey);
}

FluxTransformerConfig infer_bfl_flux_config(const StateDict& full, FluxTransformerConfig base) {
  return infer_bfl_flux_config(shapes_of(full), std::move(base));
}

FluxTransformerConfig infer_bfl_flux_config(const ShapeMap& full, FluxTransformerConfig base) {
  const ShapeMap sd = strip_prefix(full);
  check(sd.count(kDetectKey), "flux-keys", "not a BFL FLUX checkpoint: ", kDetectKey, " missing");
  const auto shape = [&](const std::string& k, size_t rank) -> const Shape& {
    auto it = sd.find(k);
    check(it != sd.end(), "flux-keys", "BFL checkpoint lacks ", k);
    check(it->second.size() == rank, "flux-keys", k, " has shape ", shape_str(it->second), ", expected ", rank, "-D");
    return it->second;
  };
  FluxTransformerConfig c = base;
  const int64_t inner = shape("img_in.weight", 2)[0];
  c.in_channels = shape("img_in.weight", 2)[1];
  c.attention_head_dim = shape(kDetectKey, 1)[0];
  check(c.attention_head_dim > 0 && inner % c.attention_head_dim == 0, "flux-keys", "inner dim ", inner,
        " is not a multiple of head dim ", c.attention_head_dim);
  c.num_attention_heads = inner / c.attention_head_dim;
  c.joint_attention_dim = shape("txt_in.weight", 2)[1];
  c.pooled_projection_dim = shape("vector_in.in_layer.weight", 2)[1];
  c.out_channels = shape("final_layer.linear.weight", 2)[0] / (c.patch_size * c.patch_size);
  c.guidance_embeds = sd.count("guidance_in.in_layer.weight") != 0;
  c.num_layers = count_blocks(sd, "double_blocks");
  c.num_single_layers = count_blocks(sd, "single_blocks");
  return c;
}

StateDict convert_bfl_flux_to_diffusers(const StateDict& full, const FluxTransformerConfig& cfg) {
  const StateDict sd = strip_prefix(full);
  check(sd.count(kDetectKey), "flux-keys", "not a BFL FLUX checkpoint: ", kDetectKey, " missing");
  StateDict out;
  std::set<std::string> used;
  for (const BflTensorMap& m : bfl_flux_tensor_map(cfg)) {
    auto it = sd.find(m.bfl);
    check(it != sd.end(), "flux-keys", "BFL checkpoint lacks ", m.bfl);
    used.insert(m.bfl);
    const Tensor& t = it->second;
    switch (m.kind) {
      case BflTensorMap::Kind::same:
        out[m.parts[0].first] = t;
        break;
      case BflTensorMap::Kind::split_rows: {
        int64_t total = 0;
        for (const auto& p : m.parts) total += p.second;
        check(t.dim() >= 1 && t.size(0) == total, "flux-keys", m.bfl, " has shape ", shape_str(t.shape()),
              ", expected ", total, " rows");
        int64_t row = 0;
        for (const auto& [name, rows] : m.parts) {
          out[name] = t.slice(0, row, row + rows);  // view
          row += rows;
        }
        break;
      }
      case BflTensorMap::Kind::swap_halves: {  // (shift, scale) -> (scale, shift) along rows: a copy
        check(t.dim() >= 1 && t.size(0) % 2 == 0, "flux-keys", m.bfl, " has an odd row count ", t.size(0));
        const int64_t h = t.size(0) / 2;
        out[m.parts[0].first] = ops::concat({t.slice(0, h, 2 * h), t.slice(0, 0, h)}, 0);
        break;
      }
    }
  }
  std::string unknown;
  int n = 0;
  for (const auto& [k, v] : sd)
    if (!used.count(k) && n++ < 8) unknown += (unknown.empty() ? "" : ", ") + k;
  check(n == 0, "flux-keys", n, " BFL key(s) have no Diffusers name: ", unknown, n > 8 ? ", ..." : "");
  return out;
}

}  // namespace diffq::models::flux
