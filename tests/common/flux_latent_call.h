// The FLUX fixtures' "call" object (prompt, height, width, num_inference_steps, guidance_scale, seed,
// max_sequence_length, as tools/reference/make_flux_quantized.py and its followers write it) as the
// FluxCallOptions of a latent-output call, the way those scripts called Diffusers.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "pipelines/flux_pipeline.h"

namespace diffq::testing {

inline FluxCallOptions flux_latent_call(const nlohmann::json& call) {
  FluxCallOptions o;
  o.prompt = {call.at("prompt").get<std::string>()};
  o.height = call.at("height");
  o.width = call.at("width");
  o.num_inference_steps = call.at("num_inference_steps");
  o.guidance_scale = call.at("guidance_scale");
  o.seed = call.at("seed");
  o.max_sequence_length = call.at("max_sequence_length");
  o.output_type = "latent";
  return o;
}

}  // namespace diffq::testing
