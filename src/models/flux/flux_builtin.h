// Named FLUX configurations that need no download (diffq bench's `builtin:` models): the transformer's
// config and the matching scheduler config. Weights come from init_parameters_randn.
//   flux-small      12 heads x 64 (inner 768), 4 double + 8 single blocks, T5 width 4096, pooled 768,
//                   guidance embedding: a FLUX.1-dev-shaped model small enough for CPU timing.
//   flux-medium     flux-small's widths with 16 double + 24 single blocks (1.12 GB in bf16): CPU offload
//                   benchmarks, which want weights of at least 1 GB.
//   flux-dev-shape  FLUX.1-dev's exact transformer config (19 + 38 blocks, 24 x 128): GPU timing.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "models/flux/flux_transformer.h"
#include "schedulers/flow_match_euler.h"

namespace diffq::models::flux {

struct FluxBuiltin {
  std::string name;
  FluxTransformerConfig transformer;
  FlowMatchEulerDiscreteConfig scheduler;  // FLUX.1-dev's (dynamic shifting)
  int64_t text_tokens = 512;              // T5 sequence length the benchmark feeds
};

const std::vector<std::string>& builtin_flux_names();
FluxBuiltin builtin_flux(std::string_view name);  // unknown name: error listing the known ones

}  // namespace diffq::models::flux
