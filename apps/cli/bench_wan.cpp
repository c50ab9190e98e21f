// diffq bench on Wan text-to-video. A builtin model (builtin:wan-small | wan-1.3b-shape | wan-14b-shape,
// src/models/wan/wan_builtin.h) is a WanPipeline built in memory from the random-weight transformer and
// a UniPC scheduler with Wan2.1's config (flow_prediction, flow sigmas, flow_shift 3.0), fed random
// prompt embeddings [1, 512, text_dim] for both the prompt and the negative prompt: no text encoder,
// no VAE, output_type "latent". CFG is on (guidance_scale 5.0, WanPipeline's default): two transformer
// passes per step, as Diffusers runs it. A WanPipeline folder runs whole, from the prompt to the frames.
#include "bench_wan.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <memory>

#include "compile_report.h"
#include "core/random.h"
#include "diffq/error.h"
#include "diffq/pipeline.h"
#include "models/wan/wan_builtin.h"
#include "modules/random_init.h"
#include "offload/offload_spec.h"
#include "pipelines/wan_pipeline.h"

namespace diffq::cli {

namespace {

constexpr double kGuidance = 5.0;  // WanPipeline.__call__'s default guidance_scale
constexpr double kFlowShift = 3.0;  // Wan2.1 T2V's scheduler config (480p)

// The builtin's transformer with random weights made in place in `dtype` (Diffusers'
// _keep_in_fp32_modules in float32, as a load with that dtype keeps them), quantized per the combination.
std::unique_ptr<models::wan::WanTransformer3DModel> builtin_transformer(const models::wan::WanTransformerConfig& cfg,
                                                                        const Combo& c) {
  using models::wan::WanTransformer3DModel;
  auto t = std::make_unique<WanTransformer3DModel>(cfg);
  init_parameters_randn(*t, c.dtype, /*seed=*/0);
  const auto keep_modules = WanTransformer3DModel::keep_in_fp32_modules();
  const auto keep = WanTransformer3DModel::keep_in_fp32_parameters(*t, keep_modules);
  for (const auto& [name, p] : t->named_parameters())
    if (std::find(keep.begin(), keep.end(), name) != keep.end() && p->dtype() != DType::f32)
      p->set(p->dense().to(DType::f32), p->residency());
  quantize_for_combo(*t, c, keep_modules);
  return t;
}

UniPCMultistepConfig wan_unipc_config() {
  UniPCMultistepConfig s;
  s.prediction_type = "flow_prediction";
  s.use_flow_sigmas = true;
  s.flow_shift = kFlowShift;
  return s;  // the rest: Diffusers' defaults, as Wan2.1's scheduler_config.json (solver_order 2, bh2, ...)
}

}  // namespace

bool is_wan_model(const std::string& model) {
  if (model.rfind("builtin:", 0) == 0) return model.rfind("builtin:wan", 0) == 0;
  try {
    return DiffusionPipeline::pipeline_class_of(model) == "WanPipeline";
  } catch (const std::exception&) {
    return false;  // not a pipeline folder: the FLUX worker reports it
  }
}

nlohmann::json run_wan_worker(BenchArgs a) {
  using clock = std::chrono::steady_clock;
  const Combo combo = parse_combo(a.combo);
  const bool builtin = a.model.rfind("builtin:", 0) == 0;
  auto t0 = clock::now();
  auto pipe = std::make_unique<WanPipeline>();
  WanCallOptions o;
  if (builtin) {
    const auto b = models::wan::builtin_wan(a.model.substr(8));
    if (a.size.empty()) a.size = std::to_string(b.latent_width * 8) + "x" + std::to_string(b.latent_height * 8);
    if (a.frames == 0) a.frames = (b.latent_frames - 1) * 4 + 1;
    pipe->transformer = builtin_transformer(b.transformer, combo);
    pipe->scheduler = std::make_unique<WanScheduler>(wan_unipc_config());
    Generator g(1);
    o.prompt_embeds = randn_tensor({1, b.text_tokens, b.transformer.text_dim}, g, combo.dtype);
    o.negative_prompt_embeds = randn_tensor({1, b.text_tokens, b.transformer.text_dim}, g, combo.dtype);
    o.output_type = "latent";  // no VAE in a builtin model
  } else {
    if (a.size.empty()) a.size = "832x480";  // WanPipeline's defaults
    if (a.frames == 0) a.frames = 81;
    WanPipelineLoadOptions lo;
    lo.quantization_config = combo_quantization_config(combo);
    pipe = WanPipeline::from_pretrained(a.model, combo.dtype, lo);
    o.prompt = {a.prompt};
  }
  const auto [width, height] = parse_size(a.size);
  if (!combo.offload.empty())
    offload::apply(pipe->offloader, pipe->offload_components(), WanPipeline::model_cpu_offload_seq,
                   offload::parse_offload_spec(combo.offload));
  auto& tr = pipe->first_transformer();
  compile_for_combo(tr, combo);  // after offloading, so its hooks are seen by the capture
  if (pipe->transformer_2 && pipe->transformer) compile_for_combo(*pipe->transformer_2, combo);
  const double load_s = std::chrono::duration<double>(clock::now() - t0).count();
  o.width = width;
  o.height = height;
  o.num_frames = a.frames;
  o.guidance_scale = kGuidance;
  o.seed = 0;
  int64_t frames_run = 0;
  const BenchTimings t = time_generations(a, [&](int64_t steps, const StepCallback& cb) {
    o.num_inference_steps = steps;
    o.callback = cb;
    frames_run = (*pipe)(o).num_frames;
  });
  const std::string what =
      builtin ? "builtin: random-weight transformer + UniPC (flow_shift 3.0), random prompt embeddings [1, 512, " +
                    std::to_string(tr.config.text_dim) + "], latent output (no text encoder, no VAE)"
              : "folder: the whole WanPipeline from the prompt to the frames";
  const nlohmann::json extra = {
      {"frames", frames_run},
      {"guidance_scale", kGuidance},
      {"transformer_passes_per_step", 2},
      {"note", "Wan: CFG on (guidance_scale 5.0): two transformer passes per step (prompt + negative prompt), "
               "as Diffusers' WanPipeline by default; " + what}};
  return worker_row(a, combo, load_s, t, tr, compile_report(tr.compiled_modules(), combo.autotune), extra);
}

}  // namespace diffq::cli
