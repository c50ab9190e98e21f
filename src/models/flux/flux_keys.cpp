#include "models/flux/flux_keys.h"

#include <set>

#include "diffq/error.h"
#include "ops/ops.h"

namespace diffq::models::flux {

namespace {

constexpr const char* kDetectKey = "double_blocks.0.img_attn.norm.key_norm.scale";

bool starts_with(const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; }

// The transformer's keys with the prefix stripped (others dropped when any key carries the prefix).
StateDict strip_prefix(const StateDict& sd) {
  bool prefixed = false;
  for (const auto& [k, v] : sd) prefixed = prefixed || starts_with(k, kBflPrefix);
  if (!prefixed) return sd;
  StateDict out;
  const size_t n = std::string(kBflPrefix).size();
  for (const auto& [k, v] : sd)
    if (starts_with(k, kBflPrefix)) out[k.substr(n)] = v;
  return out;
}

// Highest "<group>.<i>." index + 1.
int64_t count_blocks(const StateDict& sd, const std::string& group) {
  int64_t n = 0;
  const std::string p = group + ".";
  for (const auto& [k, v] : sd) {
    if (!starts_with(k, p)) continue;
    const size_t dot = k.find('.', p.size());
    n = std::max<int64_t>(n, std::stoll(k.substr(p.size(), dot - p.size())) + 1);
  }
  return n;
}

class Converter {
 public:
  explicit Converter(const StateDict& src) : src_(src) {}

  const Tensor& take(const std::string& key) {
    auto it = src_.find(key);
    check(it != src_.end(), "flux-keys", "BFL checkpoint lacks ", key);
    used_.insert(key);
    return it->second;
  }
  bool has(const std::string& key) const { return src_.count(key) != 0; }

  // weight and bias renamed as they are
  void rename(const std::string& from, const std::string& to) {
    for (const char* s : {".weight", ".bias"}) out[to + s] = take(from + s);
  }
  // rows of weight and bias split in order into the given targets
  void split_rows(const std::string& from, const std::vector<std::pair<std::string, int64_t>>& parts) {
    for (const char* s : {".weight", ".bias"}) {
      const Tensor& t = take(from + s);
      int64_t total = 0;
      for (const auto& p : parts) total += p.second;
      check(t.size(0) == total, "flux-keys", from, s, " has ", t.size(0), " rows, expected ", total);
      int64_t row = 0;
      for (const auto& [name, rows] : parts) {
        out[name + s] = t.slice(0, row, row + rows);  // view
        row += rows;
      }
    }
  }
  // (shift, scale) -> (scale, shift) along rows: a copy
  void swap_halves(const std::string& from, const std::string& to) {
    for (const char* s : {".weight", ".bias"}) {
      const Tensor& t = take(from + s);
      check(t.size(0) % 2 == 0, "flux-keys", from, s, " has an odd row count ", t.size(0));
      const int64_t h = t.size(0) / 2;
      out[to + s] = ops::concat({t.slice(0, h, 2 * h), t.slice(0, 0, h)}, 0);
    }
  }
  void scale(const std::string& from, const std::string& to) { out[to + ".weight"] = take(from + ".scale"); }

  void check_all_used() const {
    std::string unknown;
    int n = 0;
    for (const auto& [k, v] : src_)
      if (!used_.count(k) && n++ < 8) unknown += (unknown.empty() ? "" : ", ") + k;
    check(n == 0, "flux-keys", n, " BFL key(s) have no Diffusers name: ", unknown, n > 8 ? ", ..." : "");
  }

  StateDict out;

 private:
  const StateDict& src_;
  std::set<std::string> used_;
};

}  // namespace

bool is_bfl_flux_state_dict(const StateDict& sd) {
  return sd.count(kDetectKey) || sd.count(std::string(kBflPrefix) + kDetectKey);
}

FluxTransformerConfig infer_bfl_flux_config(const StateDict& full, FluxTransformerConfig base) {
  const StateDict sd = strip_prefix(full);
  check(sd.count(kDetectKey), "flux-keys", "not a BFL FLUX checkpoint: ", kDetectKey, " missing");
  const auto shape = [&](const std::string& k) -> const Shape& {
    auto it = sd.find(k);
    check(it != sd.end(), "flux-keys", "BFL checkpoint lacks ", k);
    return it->second.shape();
  };
  FluxTransformerConfig c = base;
  const int64_t inner = shape("img_in.weight")[0];
  c.in_channels = shape("img_in.weight")[1];
  c.attention_head_dim = shape(kDetectKey)[0];
  check(inner % c.attention_head_dim == 0, "flux-keys", "inner dim ", inner, " is not a multiple of head dim ",
        c.attention_head_dim);
  c.num_attention_heads = inner / c.attention_head_dim;
  c.joint_attention_dim = shape("txt_in.weight")[1];
  c.pooled_projection_dim = shape("vector_in.in_layer.weight")[1];
  c.out_channels = shape("final_layer.linear.weight")[0] / (c.patch_size * c.patch_size);
  c.guidance_embeds = sd.count("guidance_in.in_layer.weight") != 0;
  c.num_layers = count_blocks(sd, "double_blocks");
  c.num_single_layers = count_blocks(sd, "single_blocks");
  return c;
}

StateDict convert_bfl_flux_to_diffusers(const StateDict& full, const FluxTransformerConfig& cfg) {
  const StateDict sd = strip_prefix(full);
  check(sd.count(kDetectKey), "flux-keys", "not a BFL FLUX checkpoint: ", kDetectKey, " missing");
  const int64_t D = cfg.inner_dim(), M = cfg.mlp_hidden_dim();
  Converter c(sd);

  c.rename("time_in.in_layer", "time_text_embed.timestep_embedder.linear_1");
  c.rename("time_in.out_layer", "time_text_embed.timestep_embedder.linear_2");
  c.rename("vector_in.in_layer", "time_text_embed.text_embedder.linear_1");
  c.rename("vector_in.out_layer", "time_text_embed.text_embedder.linear_2");
  if (c.has("guidance_in.in_layer.weight")) {
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
  c.check_all_used();
  return std::move(c.out);
}

}  // namespace diffq::models::flux
