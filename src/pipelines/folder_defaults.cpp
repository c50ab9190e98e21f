#include "pipelines/folder_defaults.h"

#include <cmath>

#include "diffq/error.h"
#include "io/json_config.h"

namespace diffq {

namespace {
constexpr const char* kCtx = "generation_defaults";
}

FolderDefaults FolderDefaults::read(const std::filesystem::path& folder) {
  FolderDefaults f;
  const auto path = folder / kFileName;
  if (!std::filesystem::is_regular_file(path)) return f;
  const io::JsonConfig c = io::read_json_config(path, kCtx);
  check(c.json().is_object(), kCtx, path.string(), ": expected a JSON object");
  for (const auto& item : c.json().items()) {
    const std::string key = item.key();  // (a named copy: lambdas below capture it; clang refuses structured bindings)
    const auto integer = [&](std::optional<int64_t>& out) {
      const int64_t x = c.require<int64_t>(key);
      check(x >= 1, kCtx, path.string(), ": '", key, "' must be >= 1, got ", x);
      out = x;
    };
    const auto number = [&](std::optional<double>& out) {
      const double x = c.require<double>(key);
      check(std::isfinite(x) && x >= 0 && x <= 100, kCtx, path.string(), ": '", key, "' must be in [0, 100], got ", x);
      out = x;
    };
    if (key == "_comment") continue;
    else if (key == "height") integer(f.height);
    else if (key == "width") integer(f.width);
    else if (key == "num_frames") integer(f.num_frames);
    else if (key == "num_inference_steps") integer(f.num_inference_steps);
    else if (key == "max_sequence_length") integer(f.max_sequence_length);
    else if (key == "guidance_scale") number(f.guidance_scale);
    else if (key == "guidance_scale_2") number(f.guidance_scale_2);
    else if (key == "true_cfg_scale") number(f.true_cfg_scale);
    else if (key == "negative_prompt") f.negative_prompt = c.require<std::string>(key);
    else
      fail(kCtx, path.string(), ": unknown key '", key,
           "' (known: height, width, num_frames, num_inference_steps, max_sequence_length, guidance_scale, "
           "guidance_scale_2, true_cfg_scale, negative_prompt, _comment)");
  }
  return f;
}

void FolderDefaults::apply_to(GenerateParams& d) const {
  if (height) d.height = *height;
  if (width) d.width = *width;
  if (num_frames) d.num_frames = *num_frames;
  if (num_inference_steps) d.num_inference_steps = *num_inference_steps;
  if (max_sequence_length) d.max_sequence_length = *max_sequence_length;
  if (guidance_scale) d.guidance_scale = *guidance_scale;
  if (guidance_scale_2) d.guidance_scale_2 = *guidance_scale_2;
  if (true_cfg_scale) d.true_cfg_scale = *true_cfg_scale;
  if (negative_prompt) d.negative_prompt = *negative_prompt;
}

}  // namespace diffq
