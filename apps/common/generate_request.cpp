#include "generate_request.h"

#include <cmath>

namespace diffq::app {

namespace {
[[noreturn]] void bad(const std::string& field, const std::string& msg, std::optional<double> limit = std::nullopt,
                      int status = 422) {
  throw RequestError(status, field, msg, limit);
}
}  // namespace

GenerateParams to_generate_params(const GenerateRequest& r, bool video, const RequestLimits& lim,
                                  const FieldLabel& label) {
  const auto L = [&](const char* f) { return label ? label(f) : std::string(f); };
  const auto in_range = [&](const char* field, int64_t v, int64_t lo, int64_t hi) {
    if (v < lo || v > hi) bad(field, cat(L(field), " must be in [", lo, ", ", hi, "], got ", v), double(v < lo ? lo : hi));
  };
  for (const auto& [field, text] : {std::pair<const char*, const std::string*>{"prompt", &r.prompt},
                                    {"prompt_2", &r.prompt_2},
                                    {"negative_prompt", &r.negative_prompt},
                                    {"negative_prompt_2", &r.negative_prompt_2}})
    if (int64_t(text->size()) > lim.max_prompt_chars)
      bad(field, cat(L(field), " is ", text->size(), " bytes; the limit is ", lim.max_prompt_chars),
          double(lim.max_prompt_chars));
  if (r.width != 0) in_range("width", r.width, 1, lim.max_side);
  if (r.height != 0) in_range("height", r.height, 1, lim.max_side);
  const int64_t w = r.width, h = r.height;  // an unset one is the pipeline's default (checked when both given)
  if (w > 0 && h > 0 && w * h > lim.max_pixels)
    bad("size", cat("width x height = ", w, " x ", h, " = ", w * h, " pixels; the limit is ", lim.max_pixels),
        double(lim.max_pixels));
  if (r.steps) in_range("steps", *r.steps, 1, lim.max_steps);
  if (!r.sigmas.empty()) {
    if (int64_t(r.sigmas.size()) > lim.max_steps)
      bad("sigmas", cat(L("sigmas"), " gives ", r.sigmas.size(), " steps; the limit is ", lim.max_steps),
          double(lim.max_steps));
    for (double s : r.sigmas)
      if (!std::isfinite(s)) bad("sigmas", cat(L("sigmas"), " must be finite numbers"), std::nullopt, 400);
    if (r.steps && *r.steps != int64_t(r.sigmas.size()))
      bad("steps", cat(L("sigmas"), " gives ", r.sigmas.size(), " steps but ", L("steps"), " says ", *r.steps,
                       " (leave ", L("steps"), " out with ", L("sigmas"), ")"));
  }
  in_range("n", r.n, 1, lim.max_n);
  if (r.max_sequence_length) in_range("max_sequence_length", *r.max_sequence_length, 1, 512);
  for (const auto& [field, v] : {std::pair<const char*, const std::optional<double>*>{"guidance", &r.guidance},
                                 {"guidance_2", &r.guidance_2},
                                 {"true_cfg", &r.true_cfg}})
    if (*v && (!std::isfinite(**v) || **v < 0 || **v > 100))
      bad(field, cat(L(field), " must be in [0, 100], got ", **v), **v < 0 ? 0.0 : 100.0);
  if (video) {
    if (r.frames != 0) in_range("frames", r.frames, 1, lim.max_frames);
    if (!r.sigmas.empty()) bad("sigmas", cat(L("sigmas"), " is a FLUX option; WanPipeline has no custom sigmas"));
    if (!r.prompt_2.empty() || !r.negative_prompt_2.empty())
      bad(r.prompt_2.empty() ? "negative_prompt_2" : "prompt_2",
          cat(L("prompt_2"), " / ", L("negative_prompt_2"), " are FLUX options (Wan has one text encoder)"));
    if (r.true_cfg) bad("true_cfg", cat(L("true_cfg"), " is a FLUX option; Wan's CFG is ", L("guidance"), " (on when > 1)"));
  } else {
    if (r.frames != 0 || r.guidance_2)
      bad(r.frames != 0 ? "frames" : "guidance_2",
          cat(L("frames"), " / ", L("guidance_2"), " are for video pipelines; this is an image pipeline"));
  }

  GenerateParams p;
  p.prompt = r.prompt;
  p.prompt_2 = r.prompt_2;
  p.negative_prompt = r.negative_prompt;
  p.negative_prompt_2 = r.negative_prompt_2;
  p.width = r.width;
  p.height = r.height;
  p.num_frames = video ? r.frames : 0;
  if (r.steps) p.num_inference_steps = *r.steps;
  p.sigmas = r.sigmas;
  p.guidance_scale = r.guidance;
  p.guidance_scale_2 = r.guidance_2;
  p.true_cfg_scale = r.true_cfg;
  if (r.max_sequence_length) p.max_sequence_length = *r.max_sequence_length;
  p.num_outputs = r.n;
  p.seed = r.seed;
  return p;
}

std::filesystem::path default_model_folder() {
  // build/bin/diffq -> <repo>/models/demo-flux; else relative to the working directory.
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const auto p = exe.parent_path() / ".." / ".." / "models" / "demo-flux";
    if (std::filesystem::exists(p / "model_index.json")) return std::filesystem::weakly_canonical(p);
  }
  return "models/demo-flux";
}

}  // namespace diffq::app
