// kohya (sd-scripts) and ComfyUI FLUX LoRAs -> Diffusers names, by the rules of Diffusers 0.42.1's
// _convert_kohya_flux_lora_to_diffusers: alpha folded into the weights (scale alpha / rank split between down
// and up in powers of two), FLUX's fused qkv (and single blocks' qkv + mlp) split per target, block-sparse up
// weights split by rank, the final layer's (shift, scale) swapped. Names are Diffusers', including its quirks
// (targets outside the blocks without the "transformer." prefix; old-style text-encoder names): lora_adapter.cpp
// maps those onto the model and says what Diffusers would have done.
#include <algorithm>
#include <regex>
#include <set>

#include "diffq/error.h"
#include "lora/lora_file.h"
#include "ops/ops.h"

namespace diffq::lora {

namespace {
constexpr const char* kCtx = "lora";
using SD = std::map<std::string, Tensor>;

bool starts_with(const std::string& s, const std::string& p) { return s.rfind(p, 0) == 0; }

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) s.replace(at, from.size(), to);
  return s;
}

// x * s in float32, as torch multiplies a float32 tensor by a Python float.
Tensor scaled(const Tensor& x, double s) {
  if (s == 1.0) return x;
  return ops::mul_scalar(x, double(float(s)));
}

std::optional<Tensor> pop(SD& sd, const std::string& k) {
  auto it = sd.find(k);
  if (it == sd.end()) return std::nullopt;
  Tensor t = it->second;
  sd.erase(it);
  return t;
}

// scale = alpha / rank, split so that down * scale_down and up * scale_up keep their product.
std::pair<double, double> split_scale(double alpha, int64_t rank) {
  double down = double(float(alpha) / float(rank)), up = 1.0;
  while (down * 2 < up) {
    down *= 2;
    up /= 2;
  }
  return {down, up};
}

void to_ai_toolkit(SD& sds, SD& ait, const std::string& sds_key, const std::string& ait_key) {
  auto down = pop(sds, sds_key + ".lora_down.weight");
  if (!down) return;
  const int64_t rank = down->size(0);
  const auto alpha = pop(sds, sds_key + ".alpha");
  const auto [sd, su] = split_scale(alpha ? alpha->item() : double(rank), rank);
  auto up = pop(sds, sds_key + ".lora_up.weight");
  check(up.has_value(), kCtx, "'", sds_key, ".lora_down.weight' has no '", sds_key, ".lora_up.weight'");
  ait[ait_key + ".lora_A.weight"] = scaled(*down, sd);
  ait[ait_key + ".lora_B.weight"] = scaled(*up, su);
}

bool all_zero(const Tensor& t) {
  for (float v : t.to_f32_vector())
    if (v != 0.f) return false;
  return true;
}

void to_ai_toolkit_cat(SD& sds, SD& ait, const std::string& sds_key, const std::vector<std::string>& ait_keys,
                       std::vector<int64_t> dims) {
  auto down = pop(sds, sds_key + ".lora_down.weight");
  if (!down) return;
  auto up = pop(sds, sds_key + ".lora_up.weight");
  check(up.has_value(), kCtx, "'", sds_key, ".lora_down.weight' has no '", sds_key, ".lora_up.weight'");
  const int64_t rank = down->size(0);
  const auto alpha = pop(sds, sds_key + ".alpha");
  const auto [sdn, sup] = split_scale(alpha ? alpha->item() : double(rank), rank);
  const Tensor dw = scaled(*down, sdn), uw = scaled(*up, sup);
  const int64_t n = int64_t(ait_keys.size());
  if (dims.empty()) dims.assign(size_t(n), uw.size(0) / n);
  int64_t total = 0;
  for (int64_t d : dims) total += d;
  check(total == uw.size(0), kCtx, "'", sds_key, ".lora_up.weight' has ", uw.size(0), " rows; the fused layer's parts (",
        n, ") add up to ", total);
  bool sparse = false;
  int64_t r = 0;
  if (rank % n == 0) {  // block-diagonal up: each part only reads its own rank slice
    r = rank / n;
    sparse = true;
    int64_t i = 0;
    for (int64_t j = 0; j < n && sparse; ++j) {
      for (int64_t k = 0; k < n && sparse; ++k)
        if (j != k) sparse = all_zero(uw.slice(0, i, i + dims[size_t(j)]).slice(1, k * r, (k + 1) * r));
      i += dims[size_t(j)];
    }
  }
  int64_t i = 0;
  for (int64_t j = 0; j < n; ++j) {
    const std::string& k = ait_keys[size_t(j)];
    const Tensor rows = uw.slice(0, i, i + dims[size_t(j)]);
    ait[k + ".lora_A.weight"] = sparse ? dw.slice(0, j * r, (j + 1) * r).contiguous() : dw;
    ait[k + ".lora_B.weight"] = (sparse ? rows.slice(1, j * r, (j + 1) * r) : rows).contiguous();
    i += dims[size_t(j)];
  }
}

// Diffusers' _convert_text_encoder_lora_key: the old (pre-PEFT) Diffusers name of a kohya text-encoder key.
std::string text_encoder_key(const std::string& key, const std::string& lora_name) {
  const std::string drop = starts_with(lora_name, "lora_te_") ? "lora_te_" : starts_with(lora_name, "lora_te1_") ? "lora_te1_" : "lora_te2_";
  std::string n = replace_all(replace_all(key, drop, ""), "_", ".");
  n = replace_all(n, "text.model", "text_model");
  n = replace_all(n, "self.attn", "self_attn");
  n = replace_all(n, "q.proj.lora", "to_q_lora");
  n = replace_all(n, "k.proj.lora", "to_k_lora");
  n = replace_all(n, "v.proj.lora", "to_v_lora");
  n = replace_all(n, "out.proj.lora", "to_out_lora");
  n = replace_all(n, "text.projection", "text_projection");
  if (n.find("self_attn") == std::string::npos && n.find("text_projection") == std::string::npos &&
      n.find("mlp") != std::string::npos)
    n = replace_all(n, ".lora.", ".lora_linear_layer.");
  return n;
}

// Diffusers' _custom_replace: "." -> "_" up to the first of `subs` (and the dot before it).
std::string custom_replace(const std::string& key, const std::vector<std::string>& subs) {
  size_t at = std::string::npos;
  for (const auto& s : subs) at = std::min(at, key.find(s));
  if (at == std::string::npos) return replace_all(key, ".", "_");
  const size_t boundary = (at > 0 && key[at - 1] == '.') ? at - 1 : at;
  return replace_all(key.substr(0, boundary), ".", "_") + key.substr(boundary);
}

int64_t max_block(const SD& sd, const std::string& prefix) {
  int64_t m = -1;
  for (const auto& [k, v] : sd)
    if (starts_with(k, prefix)) m = std::max(m, int64_t(std::atoll(k.c_str() + prefix.size())));
  return m;
}

bool any_contains(const SD& sd, const std::string& s) {
  for (const auto& [k, v] : sd)
    if (k.find(s) != std::string::npos) return true;
  return false;
}

Tensor swap_scale_shift(const Tensor& w) {
  auto parts = w.chunk(2, 0);  // (shift, scale) -> (scale, shift)
  return ops::concat({parts[1], parts[0]}, 0);
}

}  // namespace

SD convert_kohya_flux(SD sds, const LoraModelInfo& info, std::vector<std::string>& notes, const std::string& file) {
  // Diffusers names already ("transformer.*" with lora_down/lora_up): renamed; the other keys are ignored.
  bool peft = false;
  for (const auto& [k, v] : sds) peft = peft || starts_with(k, "transformer.");
  if (peft) {
    SD out;
    std::vector<std::string> dropped;
    for (auto& [k, v] : sds) {
      if (!starts_with(k, "transformer.")) {
        dropped.push_back(k);
        continue;
      }
      out[replace_all(replace_all(k, "lora_down.weight", "lora_A.weight"), "lora_up.weight", "lora_B.weight")] = v;
    }
    if (!dropped.empty()) notes.push_back(cat(dropped.size(), " keys outside transformer.* ignored (as Diffusers), e.g. '", dropped[0], "'"));
    return out;
  }
  for (const auto& [k, v] : sds)
    check(!(starts_with(k, "lora_transformer_")), kCtx, file,
          ": the 'lora_transformer_*' mixture naming is not supported yet (key '", k, "')");

  // ComfyUI names -> kohya names.
  {
    SD renamed;
    for (auto& [k, v] : sds)
      renamed[replace_all(replace_all(k, "diffusion_model.", "lora_unet_"), "text_encoders.clip_l.transformer.", "lora_te_")] = v;
    sds.swap(renamed);
  }
  auto drop_if = [&](auto pred, const char* what) {
    std::vector<std::string> gone;
    bool zero = true;
    for (auto it = sds.begin(); it != sds.end();)
      if (pred(it->first)) {
        zero = zero && all_zero(it->second);
        gone.push_back(it->first);
        it = sds.erase(it);
      } else {
        ++it;
      }
    if (!gone.empty())
      notes.push_back(cat(gone.size(), " ", what, " keys dropped as Diffusers drops them (", zero ? "all zero" : "NOT all zero: their effect is lost",
                          "), e.g. '", gone[0], "'"));
  };
  drop_if([](const std::string& k) { return k.find("position_embedding") != std::string::npos; }, "position_embedding");
  drop_if([](const std::string& k) { return starts_with(k, "text_encoders.t5xxl.transformer."); }, "T5 (t5xxl)");
  bool diffb = false;
  for (const auto& [k, v] : sds)
    diffb = diffb || (k.find("diff_b") != std::string::npos &&
                      (starts_with(k, "lora_unet_") || starts_with(k, "lora_te_") || starts_with(k, "lora_te1_")));
  if (diffb) drop_if([](const std::string& k) { return k.find(".diff_b") != std::string::npos; }, "diff_b");
  bool normdiff = false;
  for (const auto& [k, v] : sds) normdiff = normdiff || (k.find(".norm") != std::string::npos && k.find(".diff") != std::string::npos);
  if (normdiff)
    drop_if([](const std::string& k) { return k.find(".norm") != std::string::npos || k.find(".diff") != std::string::npos; },
            "norm diff");
  std::vector<std::string> subs = {"lora_down", "lora_up"};
  if (any_contains(sds, "alpha")) subs.push_back("alpha");
  {
    SD kept;
    std::vector<std::string> unknown;
    for (auto& [k, v] : sds) {
      if (starts_with(k, "lora_unet_") || starts_with(k, "lora_te_") || starts_with(k, "lora_te1_")) kept[custom_replace(k, subs)] = v;
      else unknown.push_back(k);
    }
    if (!unknown.empty()) {
      std::string list;
      for (const auto& k : unknown) list += (list.empty() ? "" : ", ") + k;
      const std::string msg = cat(file, ": ", unknown.size(), " keys are neither lora_unet_* nor lora_te*_* (Diffusers "
                                  "would ignore them without a word): ", list);
      check(info.lenient, kCtx, msg, " (--lora-lenient skips them)");
      notes.push_back(msg + " (skipped: lenient)");
    }
    sds.swap(kept);
  }
  drop_if([](const std::string& k) { return k.find("text_projection") != std::string::npos; }, "text_projection");

  SD ait;
  const std::string T = "transformer.";
  for (int64_t i = 0; i <= max_block(sds, "lora_unet_double_blocks_"); ++i) {
    const std::string s = cat("lora_unet_double_blocks_", i, "_"), t = cat(T, "transformer_blocks.", i, ".");
    to_ai_toolkit(sds, ait, s + "img_attn_proj", t + "attn.to_out.0");
    to_ai_toolkit_cat(sds, ait, s + "img_attn_qkv", {t + "attn.to_q", t + "attn.to_k", t + "attn.to_v"}, {});
    to_ai_toolkit(sds, ait, s + "img_mlp_0", t + "ff.net.0.proj");
    to_ai_toolkit(sds, ait, s + "img_mlp_2", t + "ff.net.2");
    to_ai_toolkit(sds, ait, s + "img_mod_lin", t + "norm1.linear");
    to_ai_toolkit(sds, ait, s + "txt_attn_proj", t + "attn.to_add_out");
    to_ai_toolkit_cat(sds, ait, s + "txt_attn_qkv", {t + "attn.add_q_proj", t + "attn.add_k_proj", t + "attn.add_v_proj"}, {});
    to_ai_toolkit(sds, ait, s + "txt_mlp_0", t + "ff_context.net.0.proj");
    to_ai_toolkit(sds, ait, s + "txt_mlp_2", t + "ff_context.net.2");
    to_ai_toolkit(sds, ait, s + "txt_mod_lin", t + "norm1_context.linear");
  }
  const std::vector<int64_t> dims =
      info.single_linear1_dims.empty() ? std::vector<int64_t>{3072, 3072, 3072, 12288} : info.single_linear1_dims;
  for (int64_t i = 0; i <= max_block(sds, "lora_unet_single_blocks_"); ++i) {
    const std::string s = cat("lora_unet_single_blocks_", i, "_"), t = cat(T, "single_transformer_blocks.", i, ".");
    to_ai_toolkit_cat(sds, ait, s + "linear1", {t + "attn.to_q", t + "attn.to_k", t + "attn.to_v", t + "proj_mlp"}, dims);
    to_ai_toolkit(sds, ait, s + "linear2", t + "proj_out");
    to_ai_toolkit(sds, ait, s + "modulation_lin", t + "norm.linear");
  }
  // Outside the blocks Diffusers' names have no "transformer." prefix (see lora_adapter.cpp).
  if (any_contains(sds, "guidance_in")) {
    to_ai_toolkit(sds, ait, "lora_unet_guidance_in_in_layer", "time_text_embed.guidance_embedder.linear_1");
    to_ai_toolkit(sds, ait, "lora_unet_guidance_in_out_layer", "time_text_embed.guidance_embedder.linear_2");
  }
  if (any_contains(sds, "img_in")) to_ai_toolkit(sds, ait, "lora_unet_img_in", "x_embedder");
  if (any_contains(sds, "txt_in")) to_ai_toolkit(sds, ait, "lora_unet_txt_in", "context_embedder");
  if (any_contains(sds, "time_in")) {
    to_ai_toolkit(sds, ait, "lora_unet_time_in_in_layer", "time_text_embed.timestep_embedder.linear_1");
    to_ai_toolkit(sds, ait, "lora_unet_time_in_out_layer", "time_text_embed.timestep_embedder.linear_2");
  }
  if (any_contains(sds, "vector_in")) {
    to_ai_toolkit(sds, ait, "lora_unet_vector_in_in_layer", "time_text_embed.text_embedder.linear_1");
    to_ai_toolkit(sds, ait, "lora_unet_vector_in_out_layer", "time_text_embed.text_embedder.linear_2");
  }
  if (any_contains(sds, "final_layer")) {  // no alpha scaling here (Diffusers: "TODO: alphas"); (shift, scale) swapped
    for (const char* ab : {"lora_A", "lora_B"}) {
      const std::string src = std::string(ab) == "lora_A" ? "lora_down" : "lora_up";
      if (auto v = pop(sds, "lora_unet_final_layer_adaLN_modulation_1." + src + ".weight"))
        ait[std::string("norm_out.linear.") + ab + ".weight"] = std::string(ab) == "lora_B" ? swap_scale_shift(*v) : *v;
      if (auto v = pop(sds, "lora_unet_final_layer_linear." + src + ".weight")) ait[std::string("proj_out.") + ab + ".weight"] = *v;
    }
    for (auto it = sds.begin(); it != sds.end();)
      it = (it->first.find("final_layer") != std::string::npos && it->first.size() > 6 &&
            it->first.compare(it->first.size() - 6, 6, ".alpha") == 0)
               ? sds.erase(it)
               : std::next(it);
  }

  std::vector<std::string> rest;
  for (const auto& [k, v] : sds) rest.push_back(k);
  for (const auto& k : rest)
    check(starts_with(k, "lora_te"), kCtx, file, ": incompatible keys (Diffusers refuses them too): ", k);
  SD te;
  for (const auto& key : rest) {
    if (key.size() < 17 || key.compare(key.size() - 17, 17, ".lora_down.weight") != 0) continue;
    const std::string lora_name = key.substr(0, key.find('.'));
    const std::string dn = text_encoder_key(key, lora_name);
    const std::string up_name = replace_all(dn, ".down.", ".up.");
    int64_t rank = 0;
    if (starts_with(lora_name, "lora_te_") || starts_with(lora_name, "lora_te1_")) {
      te[dn] = *pop(sds, key);
      rank = te[dn].size(0);
      auto up = pop(sds, lora_name + ".lora_up.weight");
      check(up.has_value(), kCtx, file, ": '", key, "' has no '", lora_name, ".lora_up.weight'");
      te[up_name] = *up;
    }
    if (auto a = pop(sds, lora_name + ".alpha"); a && rank > 0) {
      const auto [sdn, sup] = split_scale(a->item(), rank);
      te[dn] = scaled(te[dn], sdn);
      te[up_name] = scaled(te[up_name], sup);
    }
  }
  if (!sds.empty()) {
    std::string list;
    for (const auto& [k, v] : sds) list += (list.empty() ? "" : ", ") + k;
    const std::string msg = cat(file, ": keys no FLUX kohya rule converts (Diffusers drops them with a warning): ", list);
    check(info.lenient, kCtx, msg, " (--lora-lenient skips them)");
    notes.push_back(msg + " (skipped: lenient)");
  }
  for (auto& [k, v] : te) ait["text_encoder." + k] = v;
  return ait;
}

}  // namespace diffq::lora
