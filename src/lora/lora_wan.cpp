// Original Wan / ComfyUI-named Wan LoRAs (diffusion_model.blocks.N.self_attn.q.lora_down.weight, ...) -> Diffusers
// names, by the rules of Diffusers 0.42.1's _convert_non_diffusers_wan_lora_to_diffusers: lora_A/lora_B or
// lora_down/lora_up, alpha folded into the weights (alpha / rank split between down and up in powers of two),
// self_attn -> attn1, cross_attn -> attn2 (k_img/v_img -> add_k_proj/add_v_proj), ffn.0/2 -> ffn.net.0.proj/net.2,
// head.head -> proj_out, text/time_embedding.{0,2} -> condition_embedder.{text,time}_embedder.linear_{1,2},
// time_projection.1 -> condition_embedder.time_proj, img_emb.proj.{1,3} -> condition_embedder.image_embedder.ff.*;
// .diff_b -> lora_B.bias (PEFT's lora_bias). Norm .diff/.diff_b keys are dropped (as Diffusers drops them), other
// full-weight .diff keys are ignored with a note (Diffusers ignores them too); anything else is an Error.
// Differences: an alpha outside the blocks is applied (Diffusers leaves it and then refuses the file).
#include <cmath>
#include <set>

#include "diffq/error.h"
#include "lora/lora_file.h"
#include "ops/ops.h"

namespace diffq::lora {

namespace {
constexpr const char* kCtx = "lora";
using SD = std::map<std::string, Tensor>;

bool has(const std::string& s, const char* p) { return s.find(p) != std::string::npos; }
bool ends_with(const std::string& s, const std::string& e) {
  return s.size() >= e.size() && s.compare(s.size() - e.size(), e.size(), e) == 0;
}

std::optional<Tensor> pop(SD& sd, const std::string& k) {
  auto it = sd.find(k);
  if (it == sd.end()) return std::nullopt;
  Tensor t = it->second;
  sd.erase(it);
  return t;
}
}  // namespace

SD convert_wan_original(SD in, std::vector<std::string>& notes, const std::string& file) {
  SD sd;
  std::vector<std::string> foreign;
  for (auto& [k, v] : in) {
    if (k.rfind("diffusion_model.", 0) == 0) sd[k.substr(16)] = v;
    else foreign.push_back(k);
  }
  if (!foreign.empty()) {
    std::string list;
    for (const auto& k : foreign) list += (list.empty() ? "" : ", ") + k;
    fail(kCtx, file, ": a Wan LoRA in the original naming, but ", foreign.size(),
         " keys lack the 'diffusion_model.' prefix: ", list);
  }
  bool any_a = false, any_b = false, time_proj_weight = false;
  for (const auto& [k, v] : sd) {
    any_a = any_a || has(k, "lora_A");
    any_b = any_b || has(k, "lora_B");
    time_proj_weight = time_proj_weight || (k.rfind("time_projection", 0) == 0 && ends_with(k, ".weight"));
  }
  const std::string down = any_a ? "lora_A" : "lora_down", up = any_b ? "lora_B" : "lora_up";

  std::vector<std::string> dropped;
  for (auto it = sd.begin(); it != sd.end();) {
    const std::string& k = it->first;
    const bool norm_diff = (ends_with(k, ".diff") || ends_with(k, ".diff_b")) && has(k, "norm");
    const bool orphan_time = has(k, "time_projection") && !time_proj_weight;
    if (norm_diff || orphan_time) {
      dropped.push_back(k);
      it = sd.erase(it);
    } else {
      ++it;
    }
  }
  if (!dropped.empty())
    notes.push_back(cat(dropped.size(), " norm .diff / bias-only time_projection keys dropped as Diffusers drops them, e.g. '",
                        dropped[0], "'"));

  SD out;
  // One target: A / B (alpha folded in), diff_b as lora_B.bias.
  auto move = [&](const std::string& src, const std::string& dst) {
    auto a = pop(sd, src + "." + down + ".weight");
    auto b = pop(sd, src + "." + up + ".weight");
    if (auto alpha = pop(sd, src + ".alpha"); alpha && a && b) {
      double sdn = alpha->item() / double(a->size(0)), sup = 1.0;  // scale = alpha / rank, split as Diffusers
      while (sdn * 2 < sup) {
        sdn *= 2;
        sup /= 2;
      }
      a = ops::mul_scalar(*a, double(float(sdn)));
      b = ops::mul_scalar(*b, double(float(sup)));
    } else if (alpha) {
      fail(kCtx, file, ": '", src, ".alpha' without both ", src, ".", down, ".weight and .", up, ".weight");
    }
    if (a) out[dst + ".lora_A.weight"] = *a;
    if (b) out[dst + ".lora_B.weight"] = *b;
    if (auto bias = pop(sd, src + ".diff_b")) out[dst + ".lora_B.bias"] = *bias;
  };

  std::set<int64_t> blocks;
  for (const auto& [k, v] : sd)
    if (k.rfind("blocks.", 0) == 0) blocks.insert(std::atoll(k.c_str() + 7));
  for (int64_t i : blocks) {
    const std::string b = cat("blocks.", i, ".");
    const char* ours[] = {"to_q", "to_k", "to_v", "to_out.0"};
    const char* theirs[] = {"q", "k", "v", "o"};
    for (int j = 0; j < 4; ++j) {
      move(b + "self_attn." + theirs[j], b + "attn1." + ours[j]);
      move(b + "cross_attn." + theirs[j], b + "attn2." + ours[j]);
    }
    move(b + "cross_attn.k_img", b + "attn2.add_k_proj");
    move(b + "cross_attn.v_img", b + "attn2.add_v_proj");
    move(b + "ffn.0", b + "ffn.net.0.proj");
    move(b + "ffn.2", b + "ffn.net.2");
  }
  move("time_projection.1", "condition_embedder.time_proj");
  // lightx2v's distill LoRAs: head.head.diff (the down matrix) with an identity up matrix and diff_b's bias.
  if (auto d = pop(sd, "head.head.diff"); d && !sd.count("head.head." + down + ".weight")) {
    const auto bias = sd.find("head.head.diff_b");
    check(bias != sd.end(), kCtx, file, ": 'head.head.diff' without 'head.head.diff_b'");
    const int64_t r = d->size(0), o = bias->second.numel();
    std::vector<float> eye(size_t(o * r), 0.f);  // [o, r] = eye(r, o)^T
    for (int64_t k = 0; k < std::min(o, r); ++k) eye[size_t(k * r + k)] = 1.f;
    out["proj_out.lora_A.weight"] = *d;
    out["proj_out.lora_B.weight"] = Tensor::from_vector(eye, {o, r});
  } else if (d) {
    sd["head.head.diff"] = *d;  // left for the .diff rule below
  }
  move("head.head", "proj_out");
  move("text_embedding.0", "condition_embedder.text_embedder.linear_1");
  move("text_embedding.2", "condition_embedder.text_embedder.linear_2");
  move("time_embedding.0", "condition_embedder.time_embedder.linear_1");
  move("time_embedding.2", "condition_embedder.time_embedder.linear_2");
  move("img_emb.proj.1", "condition_embedder.image_embedder.ff.net.0.proj");
  move("img_emb.proj.3", "condition_embedder.image_embedder.ff.net.2");

  if (!sd.empty()) {
    std::string list;
    bool all_diff = true;
    for (const auto& [k, v] : sd) {
      list += (list.empty() ? "" : ", ") + k;
      all_diff = all_diff && ends_with(k, ".diff") && !has(k, "lora");
    }
    check(all_diff, kCtx, file, ": keys no Wan LoRA rule converts (Diffusers refuses them too): ", list);
    notes.push_back(cat(sd.size(), " full-weight .diff keys ignored, as Diffusers ignores them (their effect is lost): ", list));
  }
  SD prefixed;
  for (auto& [k, v] : out) prefixed["transformer." + k] = v;
  return prefixed;
}

}  // namespace diffq::lora
