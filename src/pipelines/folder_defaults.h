// A model folder's own generation defaults: `generation_defaults.json` next to model_index.json, with
// Diffusers' call-argument names. A model trained at one size and sequence length (models/demo-flux: 64x64,
// 32 T5 tokens, true CFG) says so there, so `diffq generate -m <folder> -p ...` runs it as it was made to run;
// Diffusers ignores the file (it reads only model_index.json and the components' configs).
//
//   {"height": 64, "width": 64, "num_inference_steps": 20, "max_sequence_length": 32,
//    "true_cfg_scale": 4.0, "negative_prompt": ""}
//
// Keys: height, width, num_frames, num_inference_steps, max_sequence_length (integers >= 1), guidance_scale,
// guidance_scale_2, true_cfg_scale (numbers in [0, 100]), negative_prompt (string), and "_comment" (ignored).
// Any other key, a wrong type or a value out of range is an error naming the file, the key and the value.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "diffq/pipeline.h"

namespace diffq {

struct FolderDefaults {
  std::optional<int64_t> height, width, num_frames, num_inference_steps, max_sequence_length;
  std::optional<double> guidance_scale, guidance_scale_2, true_cfg_scale;
  std::optional<std::string> negative_prompt;  // set (even to "") = a negative prompt is given by default

  static constexpr const char* kFileName = "generation_defaults.json";
  // The folder's file, or no defaults when the folder has none (builtins, most Hub folders).
  static FolderDefaults read(const std::filesystem::path& folder);
  // Overwrites the pipeline defaults `d` with the folder's.
  void apply_to(GenerateParams& d) const;
};

}  // namespace diffq
