// XLabs FLUX LoRAs -> Diffusers names (Diffusers 0.42.1's _convert_xlabs_flux_lora_to_diffusers): no alphas;
// the fused qkv LoRAs (qkv_lora1: image stream, qkv_lora2: text stream) keep one down weight shared by q, k, v
// and split the up weight in three; proj_lora1/2 are the output projections.
#include <regex>

#include "diffq/error.h"
#include "lora/lora_file.h"

namespace diffq::lora {

namespace {
constexpr const char* kCtx = "lora";
bool has(const std::string& s, const char* p) { return s.find(p) != std::string::npos; }
}  // namespace

std::map<std::string, Tensor> convert_xlabs_flux(std::map<std::string, Tensor> sd, const std::string& file) {
  std::map<std::string, Tensor> out;
  const std::vector<std::string> keys = [&] {
    std::vector<std::string> k;
    for (const auto& [n, v] : sd) k.push_back(n);
    return k;
  }();
  static const std::regex dbl(R"((?:^|\.)double_blocks\.(\d+))"), sgl(R"((?:^|\.)single_blocks\.(\d+))");
  auto qkv = [&](const std::string& down_key, const std::vector<std::string>& targets) {
    const Tensor down = sd.at(down_key);
    std::string up_key = down_key;
    up_key.replace(up_key.rfind(".down.weight"), 12, ".up.weight");
    auto it = sd.find(up_key);
    check(it != sd.end(), kCtx, file, ": '", down_key, "' has no '", up_key, "'");
    const Tensor up = it->second;
    const int64_t n = int64_t(targets.size()), rows = up.size(0) / n;
    for (int64_t j = 0; j < n; ++j) {
      out[targets[size_t(j)] + ".lora_A.weight"] = down;
      out[targets[size_t(j)] + ".lora_B.weight"] = up.slice(0, j * rows, (j + 1) * rows).contiguous();
    }
    sd.erase(down_key);
    sd.erase(it);
  };
  for (const std::string& k : keys) {
    if (!sd.count(k)) continue;  // an up weight a qkv split already took
    std::smatch m;
    std::string nk;
    const bool is_double = (k.rfind("diffusion_model.double_blocks", 0) == 0 || k.rfind("double_blocks", 0) == 0);
    const bool is_single = (k.rfind("diffusion_model.single_blocks", 0) == 0 || k.rfind("single_blocks", 0) == 0);
    if (is_double && std::regex_search(k, m, dbl)) {
      const std::string b = "transformer.transformer_blocks." + m[1].str();
      nk = b;
      if (has(k, "processor.proj_lora1")) nk += ".attn.to_out.0";
      else if (has(k, "processor.proj_lora2")) nk += ".attn.to_add_out";
      else if (has(k, "processor.qkv_lora2") && !has(k, "up")) qkv(k, {b + ".attn.add_q_proj", b + ".attn.add_k_proj", b + ".attn.add_v_proj"});
      else if (has(k, "processor.qkv_lora1") && !has(k, "up")) qkv(k, {b + ".attn.to_q", b + ".attn.to_k", b + ".attn.to_v"});
    } else if (is_single && std::regex_search(k, m, sgl)) {
      const std::string b = "transformer.single_transformer_blocks." + m[1].str();
      nk = b;
      if (has(k, "proj_lora")) nk += ".proj_out";
      else if (has(k, "qkv_lora") && !has(k, "up")) qkv(k, {b + ".attn.to_q", b + ".attn.to_k", b + ".attn.to_v"});
    } else {
      nk = k;  // left as is (and reported as unknown by lora_adapter.cpp when nothing matches it)
    }
    if (has(k, "qkv")) continue;
    if (nk != k) nk += has(k, "down") ? ".lora_A.weight" : has(k, "up") ? ".lora_B.weight" : "";
    out[nk] = sd.at(k);
    sd.erase(k);
  }
  return out;
}

}  // namespace diffq::lora
