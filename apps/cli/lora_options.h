// --lora FILE[:scale] (repeatable) for `diffq generate` and `diffq bench`: each file loads through the public
// DiffusionPipeline::load_lora under its stem's name (made unique with _2, _3 ... when stems repeat), then
// set_adapters(names, scales) makes them all active with their scales; fuse_lora(1) merges them on request.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "diffq/pipeline.h"

namespace diffq::cli {

struct LoraArg {
  std::string file;
  double scale = 1.0;
};
// "style.safetensors:0.8" -> {style.safetensors, 0.8}; no ":<number>" suffix: scale 1.
LoraArg parse_lora_arg(const std::string& text);

// Loads `args` (into the transformer) and `args_2` (Wan2.2: into transformer_2, names suffixed "_2"), makes them
// the active adapters with their scales and, with `fuse`, fuses them (quantized layers stay unfused: said on
// stderr unless `quiet`). Returns the adapters as JSON ([{name, file, component, weight, warnings}], fused).
nlohmann::json apply_loras(DiffusionPipeline& pipe, const std::vector<std::string>& args,
                           const std::vector<std::string>& args_2, bool lenient, bool fuse, bool quiet);

}  // namespace diffq::cli
