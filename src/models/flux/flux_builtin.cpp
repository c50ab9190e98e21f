#include "models/flux/flux_builtin.h"

#include "diffq/error.h"

namespace diffq::models::flux {

namespace {
FlowMatchEulerDiscreteConfig flux_dev_scheduler() {
  FlowMatchEulerDiscreteConfig s;
  s.shift = 3.0;
  s.use_dynamic_shifting = true;
  s.base_shift = 0.5;
  s.max_shift = 1.15;
  s.base_image_seq_len = 256;
  s.max_image_seq_len = 4096;
  return s;
}
}  // namespace

const std::vector<std::string>& builtin_flux_names() {
  static const std::vector<std::string> names = {"flux-small", "flux-medium", "flux-dev-shape", "flux-dev-width"};
  return names;
}

FluxBuiltin builtin_flux(std::string_view name) {
  FluxBuiltin b;
  b.name = std::string(name);
  b.scheduler = flux_dev_scheduler();
  FluxTransformerConfig& c = b.transformer;  // defaults are FLUX.1's
  c.guidance_embeds = true;
  if (name == "flux-dev-shape") {
    b.text_tokens = 512;
    return b;
  }
  if (name == "flux-dev-width") {
    // FLUX.1-dev's widths (24 heads x 128, T5 width 4096) with 1 double and 2 single blocks: a step has
    // FLUX.1's GEMM and attention shapes at a fraction of its time (issue 17's FLUX.1-width benchmark).
    c.num_layers = 1;
    c.num_single_layers = 2;
    b.text_tokens = 256;
    return b;
  }
  if (name == "flux-small" || name == "flux-medium") {
    // flux-medium: flux-small's widths, 16 + 24 blocks: 0.56 B parameters, 1.12 GB in bf16 (the
    // offload benchmarks' model: weights of at least 1 GB).
    const bool medium = name == "flux-medium";
    c.num_layers = medium ? 16 : 4;
    c.num_single_layers = medium ? 24 : 8;
    c.num_attention_heads = 12;
    c.attention_head_dim = 64;
    c.axes_dims_rope = {8, 28, 28};  // sums to the head dim, in FLUX.1's proportions
    b.text_tokens = 128;
    return b;
  }
  std::string known;
  for (const auto& n : builtin_flux_names()) known += (known.empty() ? "" : ", ") + n;
  fail("flux", "unknown builtin model '", name, "' (known: ", known, ")");
}

}  // namespace diffq::models::flux
