// The tiny-flux fixture transformer (tests/fixtures/tiny-flux, with Diffusers' output) run eagerly, then
// fully compiled (fullgraph) with one pass switched off and with every pass on: the outputs and pass
// statistics the per-pass tests compare. `prepare` (optional) changes the model first (quantizes it).
#pragma once

#include <filesystem>
#include <functional>
#include <memory>

#include "compile/compile_options.h"
#include "compile/compiled_graph.h"
#include "compile/compiled_module.h"
#include "io/safetensors.h"
#include "models/flux/flux_transformer.h"

namespace compile_test {

struct FluxPassAB {
  std::unique_ptr<diffq::models::flux::FluxTransformer2DModel> model;  // left compiled with every pass on
  diffq::Tensor eager, y_off, y_on, diffusers_out;
  diffq::compile::PassStats s_off, s_on;
};

inline FluxPassAB flux_pass_ab(
    const std::function<void(diffq::compile::CompileOptions&)>& switch_off,
    const std::function<void(diffq::models::flux::FluxTransformer2DModel&)>& prepare = nullptr) {
  const std::filesystem::path dev = std::filesystem::path(DIFFQ_SOURCE_DIR) / "tests/fixtures/tiny-flux";
  FluxPassAB r;
  r.model = diffq::models::flux::FluxTransformer2DModel::from_pretrained(dev / "transformer");
  if (prepare) prepare(*r.model);
  const auto ref = diffq::io::SafetensorsFile::open(dev / "reference/transformer_forward.safetensors");
  auto run = [&] {
    return (*r.model)(ref.tensor("in.hidden_states"), ref.tensor("in.encoder_hidden_states"),
                      ref.tensor("in.pooled_projections"), ref.tensor("in.timestep"), ref.tensor("in.guidance"),
                      ref.tensor("in.txt_ids"), ref.tensor("in.img_ids"));
  };
  r.eager = run();
  r.diffusers_out = ref.tensor("out");
  diffq::compile::CompileOptions on, off;
  on.fullgraph = off.fullgraph = true;
  switch_off(off);
  r.model->compile(off);
  r.y_off = run();
  r.s_off = r.model->compiled_modules()[0]->stats().last_passes;
  r.model->compile(on);
  r.y_on = run();
  r.s_on = r.model->compiled_modules()[0]->stats().last_passes;
  return r;
}

}  // namespace compile_test
