// A fixture's pipeline call (cases.json "call": prompt, height, width, num_inference_steps, guidance_scale,
// max_sequence_length, seed) as public-API GenerateParams with latent output: the LoRA tests' shared call.
#pragma once

#include <nlohmann/json.hpp>

#include "diffq/pipeline.h"

namespace diffq::testing {

inline GenerateParams latent_call(const nlohmann::json& c) {
  GenerateParams g;
  g.prompt = c.at("prompt");
  g.height = c.at("height");
  g.width = c.at("width");
  g.num_inference_steps = c.at("num_inference_steps");
  g.guidance_scale = c.at("guidance_scale").get<double>();
  g.max_sequence_length = c.at("max_sequence_length");
  g.seed = c.at("seed");
  g.output_latents_only = true;
  return g;
}

}  // namespace diffq::testing
