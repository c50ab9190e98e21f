#include "models/wan/wan_keys.h"

#include <algorithm>
#include <functional>
#include <vector>

#include "diffq/error.h"

namespace diffq::models::wan {

namespace {

constexpr const char* kCtx = "wan-single-file";
// Wan's head size: not stored in the weights; 128 in every released Wan2.1 / Wan2.2 transformer.
constexpr int64_t kWanHeadDim = 128;

bool starts_with(const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; }
bool contains(const std::string& s, const std::string& p) { return s.find(p) != std::string::npos; }

// The transformer's tensors: those under the ComfyUI prefix (stripped) when any key carries it.
WanShapeMap strip(const WanShapeMap& shapes, const std::string& prefix) {
  if (prefix.empty()) return shapes;
  WanShapeMap out;
  for (const auto& [k, v] : shapes)
    if (starts_with(k, prefix)) out[k.substr(prefix.size())] = v;
  return out;
}

std::string first_key(const WanShapeMap& sd, const std::function<bool(const std::string&)>& pred) {
  for (const auto& [k, v] : sd)
    if (pred(k)) return k;
  return {};
}

// "blocks.<i>.<rest>" -> (i, rest); false for other names.
bool split_block(const std::string& name, const std::string& group, int64_t& index, std::string& rest) {
  const std::string p = group + ".";
  if (!starts_with(name, p)) return false;
  const size_t dot = name.find('.', p.size());
  if (dot == std::string::npos) return false;
  const std::string idx = name.substr(p.size(), dot - p.size());
  if (idx.empty() || idx.size() > 9 || idx.find_first_not_of("0123456789") != std::string::npos) return false;
  index = std::stoll(idx);
  rest = name.substr(dot + 1);
  return true;
}

const Shape& shape_of(const WanShapeMap& sd, const std::string& key, size_t rank, const std::string& source) {
  auto it = sd.find(key);
  check(it != sd.end(), kCtx, source, ": the Wan transformer lacks the tensor ", key);
  check(it->second.size() == rank, kCtx, source, ": ", key, " has shape ", shape_str(it->second), ", expected ",
        rank, "-D");
  return it->second;
}

}  // namespace

WanShapeMap wan_shapes_of(const StateDict& sd) {
  WanShapeMap m;
  for (const auto& [k, v] : sd) m[k] = v.shape();
  return m;
}

WanCheckpointKind classify_wan_checkpoint(const WanShapeMap& all, const std::string& source) {
  WanCheckpointKind kind;
  for (const auto& [k, v] : all)
    if (starts_with(k, kWanComfyPrefix)) kind.prefix = kWanComfyPrefix;
  const WanShapeMap sd = strip(all, kind.prefix);
  const auto has = [&](const char* k) { return sd.count(k) != 0; };

  check(!has("double_blocks.0.img_attn.proj.weight") && !has("double_blocks.0.img_attn.norm.key_norm.scale") &&
            !has("transformer_blocks.0.attn.norm_added_k.weight"),
        kCtx, source, ": this is a FLUX transformer (double_blocks.* / transformer_blocks.*), not a Wan transformer");
  std::string k = first_key(sd, [](const std::string& s) { return starts_with(s, "vace_"); });
  check(k.empty(), kCtx, source, ": this is a Wan VACE transformer (", k,
        "); only text-to-video Wan transformers are supported");
  k = first_key(sd, [](const std::string& s) {
    return starts_with(s, "motion_encoder.") || starts_with(s, "face_adapter.") || starts_with(s, "face_encoder.");
  });
  check(k.empty(), kCtx, source, ": this is a Wan Animate transformer (", k,
        "); only text-to-video Wan transformers are supported");
  k = first_key(sd, [](const std::string& s) {
    return starts_with(s, "img_emb.") || contains(s, ".cross_attn.k_img.") || contains(s, ".cross_attn.v_img.") ||
           starts_with(s, "condition_embedder.image_embedder.") || contains(s, ".attn2.add_k_proj.");
  });
  check(k.empty(), kCtx, source, ": this is an image-to-video (I2V / FLF2V) Wan transformer (", k,
        " belongs to its image embedder); only text-to-video Wan transformers (T2V, TI2V) are supported");

  if (has("head.modulation") || has("blocks.0.self_attn.q.weight") || has("head.head.weight")) {
    kind.naming = WanNaming::original;
  } else if (has("condition_embedder.time_proj.weight") || has("blocks.0.attn1.to_q.weight")) {
    kind.naming = WanNaming::diffusers;
  } else {
    fail(kCtx, source, ": not a Wan transformer: neither the original / ComfyUI key head.modulation nor Diffusers' "
         "condition_embedder.time_proj.weight is present (", sd.size(), " tensors",
         sd.empty() ? "" : ", e.g. " + sd.begin()->first, ")");
  }

  // Wan2.2 I2V-A14B has no image embedder; its patch_embedding takes the noise and the image latent
  // (36 channels) and gives back 16.
  const char* out_key = kind.naming == WanNaming::original ? "head.head.weight" : "proj_out.weight";
  auto pe = sd.find("patch_embedding.weight"), po = sd.find(out_key);
  if (pe != sd.end() && po != sd.end() && pe->second.size() == 5 && po->second.size() == 2) {
    const int64_t vol = pe->second[2] * pe->second[3] * pe->second[4];
    const int64_t in = pe->second[1], out = vol > 0 ? po->second[0] / vol : 0;
    check(in == out, kCtx, source, ": this is an image-to-video Wan transformer: patch_embedding.weight takes ", in,
          " input channels but ", out_key, " gives ", out,
          " back (the image latent is concatenated to the noise, as in Wan2.2 I2V-A14B); only text-to-video Wan "
          "transformers (T2V, TI2V) are supported");
  }
  return kind;
}

std::optional<std::string> wan_original_to_diffusers_name(const std::string& name) {
  static const std::map<std::string, std::string> top = {
      {"patch_embedding.weight", "patch_embedding.weight"},
      {"patch_embedding.bias", "patch_embedding.bias"},
      {"text_embedding.0.weight", "condition_embedder.text_embedder.linear_1.weight"},
      {"text_embedding.0.bias", "condition_embedder.text_embedder.linear_1.bias"},
      {"text_embedding.2.weight", "condition_embedder.text_embedder.linear_2.weight"},
      {"text_embedding.2.bias", "condition_embedder.text_embedder.linear_2.bias"},
      {"time_embedding.0.weight", "condition_embedder.time_embedder.linear_1.weight"},
      {"time_embedding.0.bias", "condition_embedder.time_embedder.linear_1.bias"},
      {"time_embedding.2.weight", "condition_embedder.time_embedder.linear_2.weight"},
      {"time_embedding.2.bias", "condition_embedder.time_embedder.linear_2.bias"},
      {"time_projection.1.weight", "condition_embedder.time_proj.weight"},
      {"time_projection.1.bias", "condition_embedder.time_proj.bias"},
      {"head.head.weight", "proj_out.weight"},
      {"head.head.bias", "proj_out.bias"},
      {"head.modulation", "scale_shift_table"},
  };
  // Within a block (after "blocks.<i>.").
  static const std::map<std::string, std::string> block = [] {
    std::map<std::string, std::string> m;
    for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{{"self_attn", "attn1"},
                                                                                  {"cross_attn", "attn2"}}) {
      for (const auto& [p, q] : std::vector<std::pair<std::string, std::string>>{
               {"q", "to_q"}, {"k", "to_k"}, {"v", "to_v"}, {"o", "to_out.0"}})
        for (const char* s : {".weight", ".bias"}) m[from + "." + p + s] = to + "." + q + s;
      m[from + ".norm_q.weight"] = to + ".norm_q.weight";
      m[from + ".norm_k.weight"] = to + ".norm_k.weight";
    }
    for (const char* s : {".weight", ".bias"}) {
      m[std::string("norm3") + s] = std::string("norm2") + s;  // the cross-attention norm
      m[std::string("ffn.0") + s] = std::string("ffn.net.0.proj") + s;
      m[std::string("ffn.2") + s] = std::string("ffn.net.2") + s;
    }
    m["modulation"] = "scale_shift_table";
    return m;
  }();
  if (auto it = top.find(name); it != top.end()) return it->second;
  int64_t i = 0;
  std::string rest;
  if (split_block(name, "blocks", i, rest))
    if (auto it = block.find(rest); it != block.end()) return "blocks." + std::to_string(i) + "." + it->second;
  return std::nullopt;
}

WanShapeMap wan_diffusers_shapes(const WanShapeMap& all, const WanCheckpointKind& kind, const std::string& source) {
  const WanShapeMap sd = strip(all, kind.prefix);
  if (kind.naming == WanNaming::diffusers) return sd;
  WanShapeMap out;
  std::string unknown;
  int n = 0;
  for (const auto& [k, v] : sd) {
    if (auto d = wan_original_to_diffusers_name(k)) {
      out[*d] = v;
    } else if (n++ < 8) {
      unknown += (unknown.empty() ? "" : ", ") + k;
    }
  }
  check(n == 0, kCtx, source, ": ", n, " tensor(s) are not part of a text-to-video Wan transformer: ", unknown,
        n > 8 ? ", ..." : "");
  return out;
}

WanTransformerConfig infer_wan_config_from_shapes(const WanShapeMap& sd, const std::optional<WanTransformerConfig>& base,
                                                  const std::string& source) {
  WanTransformerConfig c;  // Diffusers' defaults for what the weights do not say (eps, rope_max_seq_len, qk_norm)
  const Shape& pe = shape_of(sd, "patch_embedding.weight", 5, source);  // [D, C, pt, ph, pw]
  const int64_t D = pe[0];
  c.in_channels = pe[1];
  c.patch_size = {pe[2], pe[3], pe[4]};
  const int64_t vol = pe[2] * pe[3] * pe[4];
  const Shape& po = shape_of(sd, "proj_out.weight", 2, source);  // [Co * vol, D]
  check(vol > 0 && po[0] % vol == 0, kCtx, source, ": proj_out.weight has ", po[0],
        " rows, not a multiple of the patch volume ", vol);
  c.out_channels = po[0] / vol;
  c.text_dim = shape_of(sd, "condition_embedder.text_embedder.linear_1.weight", 2, source)[1];
  c.freq_dim = shape_of(sd, "condition_embedder.time_embedder.linear_1.weight", 2, source)[1];
  int64_t layers = 0;
  for (const auto& [k, v] : sd) {
    int64_t i = 0;
    std::string rest;
    if (split_block(k, "blocks", i, rest)) layers = std::max(layers, i + 1);
  }
  c.num_layers = layers;
  if (layers > 0) {
    c.ffn_dim = shape_of(sd, "blocks.0.ffn.net.0.proj.weight", 2, source)[0];
    c.cross_attn_norm = sd.count("blocks.0.norm2.weight") != 0;
  }
  c.attention_head_dim = base ? base->attention_head_dim : kWanHeadDim;
  check(c.attention_head_dim > 0 && D % c.attention_head_dim == 0, kCtx, source, ": inner dim ", D,
        " (patch_embedding.weight) is not a multiple of the head dim ", c.attention_head_dim,
        base ? " of the given config" : " (Wan's; give the pipeline folder's transformer config for other sizes)");
  c.num_attention_heads = D / c.attention_head_dim;
  if (!base) {
    c.validate(source);
    return c;
  }

  // The folder's config wins; the tensors must agree with it.
  const WanTransformerConfig& b = *base;
  const auto agree = [&](const char* field, const auto& file, const auto& cfg) {
    check(file == cfg, kCtx, source, ": the file's tensors give ", field, " = ", file, " but the config says ", cfg,
          " (a transformer of another Wan model?)");
  };
  agree("inner dim (num_attention_heads * attention_head_dim)", D, b.inner_dim());
  agree("in_channels", c.in_channels, b.in_channels);
  agree("out_channels", c.out_channels, b.out_channels);
  agree("patch_size[0]", c.patch_size[0], b.patch_size.at(0));
  agree("patch_size[1]", c.patch_size[1], b.patch_size.at(1));
  agree("patch_size[2]", c.patch_size[2], b.patch_size.at(2));
  agree("text_dim", c.text_dim, b.text_dim);
  agree("freq_dim", c.freq_dim, b.freq_dim);
  agree("num_layers", c.num_layers, b.num_layers);
  if (layers > 0) {
    agree("ffn_dim", c.ffn_dim, b.ffn_dim);
    agree("cross_attn_norm", c.cross_attn_norm, b.cross_attn_norm);
  }
  b.validate(source);
  return b;
}

}  // namespace diffq::models::wan
