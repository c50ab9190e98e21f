#include "models/wan/wan_builtin.h"

#include <algorithm>

#include "diffq/error.h"
#include "modules/random_init.h"

namespace diffq::models::wan {

const std::vector<std::string>& builtin_wan_names() {
  static const std::vector<std::string> names = {"wan-small", "wan-1.3b-shape", "wan-14b-shape"};
  return names;
}

WanBuiltin builtin_wan(std::string_view name) {
  WanBuiltin b;
  b.name = std::string(name);
  WanTransformerConfig& c = b.transformer;  // defaults are Wan2.1-T2V-14B's
  if (name == "wan-14b-shape") return b;
  if (name == "wan-1.3b-shape" || name == "wan-small") {
    c.num_attention_heads = 12;
    c.ffn_dim = 8960;
    c.num_layers = 30;
    if (name == "wan-small") {
      c.num_layers = 2;
      b.latent_frames = 5;
      b.latent_height = 32;
      b.latent_width = 32;
    }
    return b;
  }
  std::string known;
  for (const auto& n : builtin_wan_names()) known += (known.empty() ? "" : ", ") + n;
  fail("wan", "unknown builtin model '", name, "' (known: ", known, ")");
}

StateDict random_wan_state_dict(const WanTransformerConfig& cfg, DType dtype, uint64_t seed, double std) {
  WanTransformer3DModel m(cfg);
  init_parameters_randn(m, dtype, seed, std);
  const auto fp32 = WanTransformer3DModel::keep_in_fp32_parameters(m, WanTransformer3DModel::keep_in_fp32_modules());
  StateDict sd;
  for (const auto& [name, p] : m.named_parameters()) {
    const bool keep = std::find(fp32.begin(), fp32.end(), name) != fp32.end();
    sd.emplace(name, keep ? p->dense().to(DType::f32) : p->dense());
  }
  return sd;
}

std::unique_ptr<WanTransformer3DModel> random_wan_transformer(const WanTransformerConfig& cfg, DType dtype,
                                                              uint64_t seed, double std) {
  LoadOptions o;
  o.dtype = dtype;
  o.source = "random weights";
  return WanTransformer3DModel::from_state_dict(cfg, random_wan_state_dict(cfg, dtype, seed, std), o);
}

}  // namespace diffq::models::wan
