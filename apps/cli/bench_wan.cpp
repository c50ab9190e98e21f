// diffq bench on Wan text-to-video, through the public DiffusionPipeline. A builtin model (builtin:wan-small |
// wan-1.3b-shape | wan-14b-shape) is DiffusionPipeline's in-memory WanPipeline: the random-weight transformer
// and a UniPC scheduler with Wan2.1's config (flow_prediction, flow sigmas, flow_shift 3.0), fed random
// prompt embeddings [1, 512, text_dim] for both the prompt and the negative prompt: no text encoder, no VAE,
// latent output. CFG is on (guidance_scale 5.0, WanPipeline's default): two transformer passes per step, as
// Diffusers runs it. A WanPipeline folder runs whole, from the prompt to the frames.
#include "bench_wan.h"

#include <memory>

#include "diffq/error.h"
#include "diffq/pipeline.h"

namespace diffq::cli {

namespace {
constexpr double kGuidance = 5.0;  // WanPipeline.__call__'s default guidance_scale
}  // namespace

bool is_wan_model(const std::string& model) {
  try {
    return DiffusionPipeline::pipeline_class_of(model) == "WanPipeline";
  } catch (const std::exception&) {
    return false;  // not a pipeline folder or builtin: the FLUX worker reports it
  }
}

nlohmann::json run_wan_worker(BenchArgs a) {
  const Combo combo = parse_combo(a.combo);
  const bool builtin = a.model.rfind("builtin:", 0) == 0;
  double load_s = 0;
  auto pipe = load_for_combo(a, combo, load_s);
  const GenerateParams d = pipe->defaults();  // a builtin's own grid; WanPipeline's 832x480, 81 frames for folders
  if (a.size.empty()) a.size = std::to_string(d.width) + "x" + std::to_string(d.height);
  if (a.frames == 0) a.frames = d.num_frames;
  const auto [width, height] = parse_size(a.size);
  GenerateParams p;
  p.prompt = a.prompt;
  p.output_latents_only = builtin;  // no VAE in a builtin model
  p.width = width;
  p.height = height;
  p.num_frames = a.frames;
  p.guidance_scale = kGuidance;
  p.seed = 0;
  int64_t frames_run = 0, calls = 0;
  GenerateResult last;  // the final timed generation's: its cache report, its output for --quality
  const BenchTimings t = time_generations(a, [&](int64_t steps, const StepCallback& cb) {
    p.num_inference_steps = steps;
    p.on_step = cb;
    GenerateResult r = pipe->generate(p);
    frames_run = r.used.num_frames;
    if (++calls == a.warmup + a.repeat) last = std::move(r);
  });
  const nlohmann::json extra = {
      {"frames", frames_run},
      {"guidance_scale", kGuidance},
      {"transformer_passes_per_step", 2},
      {"note", "Wan: CFG on (guidance_scale 5.0): two transformer passes per step (prompt + negative prompt), "
               "as Diffusers' WanPipeline by default; " + pipe->description()}};
  nlohmann::json row = worker_row(a, combo, load_s, t, *pipe, extra);
  row.update(last_run_fields(a, combo, last, /*video=*/true));  // after the row read the memory peaks
  return row;
}

}  // namespace diffq::cli
