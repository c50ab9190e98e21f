// The tiny-flux fixture transformer (tests/fixtures/tiny-flux, with Diffusers' output) run eagerly, then
// fully compiled (fullgraph) with one pass switched off and with every pass on: the outputs and pass
// statistics the per-pass tests compare. `prepare` (optional) changes the model first (quantizes it);
// `load` (optional) loads it in another dtype.
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

inline std::filesystem::path tiny_flux_dir() {
  return std::filesystem::path(DIFFQ_SOURCE_DIR) / "tests/fixtures/tiny-flux";
}

// The model on the fixture's recorded transformer inputs (reference/transformer_forward.safetensors).
inline diffq::Tensor run_flux_fixture(diffq::models::flux::FluxTransformer2DModel& m) {
  static const auto ref = diffq::io::SafetensorsFile::open(tiny_flux_dir() / "reference/transformer_forward.safetensors");
  return m(ref.tensor("in.hidden_states"), ref.tensor("in.encoder_hidden_states"), ref.tensor("in.pooled_projections"),
           ref.tensor("in.timestep"), ref.tensor("in.guidance"), ref.tensor("in.txt_ids"), ref.tensor("in.img_ids"));
}

struct FluxPassAB {
  std::unique_ptr<diffq::models::flux::FluxTransformer2DModel> model;  // left compiled with every pass on
  diffq::Tensor eager, y_off, y_on, diffusers_out;
  diffq::compile::PassStats s_off, s_on;
};

inline FluxPassAB flux_pass_ab(
    const std::function<void(diffq::compile::CompileOptions&)>& switch_off,
    const std::function<void(diffq::models::flux::FluxTransformer2DModel&)>& prepare = nullptr,
    const diffq::LoadOptions& load = {}) {
  FluxPassAB r;
  r.model = diffq::models::flux::FluxTransformer2DModel::from_pretrained(tiny_flux_dir() / "transformer", load);
  if (prepare) prepare(*r.model);
  auto run = [&] { return run_flux_fixture(*r.model); };
  r.eager = run();
  r.diffusers_out =
      diffq::io::SafetensorsFile::open(tiny_flux_dir() / "reference/transformer_forward.safetensors").tensor("out");
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
