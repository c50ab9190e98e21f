// diffq bench: latency and peak memory of a pipeline under several "combinations" (dtype,
// quantization scheme, compile, offload mode), the table the Diffusers documents judge by.
// Each combination runs in a fresh worker process (this binary, `bench --worker`), so its peak RSS
// is its own; the parent collects one JSON line per worker and prints a markdown table or --json.
// This file: the command, and the FLUX worker; the Wan worker is bench_wan.cpp, what both share
// bench_common.{h,cpp}.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "bench_common.h"
#include "bench_quality.h"
#include "bench_wan.h"
#include "commands.h"
#include "generate_request.h"
#include "diffq/error.h"
#include "diffq/pipeline.h"
#include "diffq/runtime.h"

namespace diffq::cli {

namespace {

// One FLUX combination in this process: load, warm up, time `repeat` generations. A builtin model
// (builtin:flux-*) is DiffusionPipeline's random-weight transformer fed random prompt embeddings, latents only.
nlohmann::json run_flux_worker(BenchArgs a) {
  const Combo combo = parse_combo(a.combo);
  check(a.frames == 0, "bench", "--frames is for Wan models; ", a.model, " makes images");
  double load_s = 0;
  auto pipe = load_for_combo(a, combo, load_s);
  if (a.size.empty()) {  // 512x512, or the size a folder's generation_defaults.json gives (models/demo-flux: 64x64)
    const GenerateParams d = pipe->defaults();
    const bool own = a.model.rfind("builtin:", 0) != 0 && std::filesystem::exists(std::filesystem::path(a.model) / "generation_defaults.json");
    a.size = own ? std::to_string(d.width) + "x" + std::to_string(d.height) : "512x512";
  }
  const auto [width, height] = parse_size(a.size);
  GenerateParams p;
  p.prompt = a.prompt;
  p.output_latents_only = a.model.rfind("builtin:", 0) == 0;  // no VAE in a builtin model
  p.width = width;
  p.height = height;
  p.seed = 0;
  GenerateResult last;  // the final timed generation's: its cache report, its output for --quality
  int64_t calls = 0;
  const BenchTimings t = time_generations(a, [&](int64_t steps, const StepCallback& cb) {
    p.num_inference_steps = steps;
    p.on_step = cb;
    GenerateResult r = pipe->generate(p);
    if (++calls == a.warmup + a.repeat) last = std::move(r);
  });
  nlohmann::json row = worker_row(a, combo, load_s, t, *pipe);
  row.update(last_run_fields(a, combo, last, /*video=*/false));  // after the row read the memory peaks
  row.update(adherence_fields(a, *pipe));
  return row;
}

void run(BenchArgs a) {
  if (a.model.empty()) a.model = app::default_model_folder().string();
  if (a.threads > 0) set_num_threads(a.threads);
  check(a.repeat >= 1 && a.steps >= 1 && a.warmup >= 0, "bench", "--repeat and --steps must be >= 1, --warmup >= 0");
  check(a.frames >= 0, "bench", "--frames must be positive, got ", a.frames);
  if (!a.worker) check_bench_args(a);  // a combination that does not parse says so before a missing GPU does
  check_execution_device(Device::parse(a.device));  // no backend / no GPU: say so before any worker starts
  if (!a.worker) return run_bench_parent(a);
  const nlohmann::json row = is_wan_model(a.model) ? run_wan_worker(a) : run_flux_worker(a);
  std::printf("%s\n", row.dump().c_str());
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  auto* cmd = app.add_subcommand("bench", "Latency and peak memory per combination (dtype, ...), as a markdown table");
  cmd->add_option("-m,--model", a->model,
                  "builtin:flux-small | builtin:flux-medium | builtin:flux-dev-shape | builtin:flux-dev-width | "
                  "builtin:wan-small | builtin:wan-1.3b-shape | builtin:wan-14b-shape | a FluxPipeline or WanPipeline folder "
                  "(default: the bundled demo model models/demo-flux)");
  cmd->add_option("--combos", a->combos,
                  "combinations separated by ';' (e.g. \"fp32; bf16; bf16+nf4+compile; bf16+fbc:0.1\"); a step cache "
                  "is +fbc[:T], +taylorseer[:...], +magcache[:...] or +teacache[:T], as generate --cache");
  cmd->add_option("--steps", a->steps, "denoising steps per generation (default 4)");
  cmd->add_option("--size", a->size,
                  "WIDTHxHEIGHT (default: FLUX 512x512, or a folder's generation_defaults.json size; Wan builtins their own grid, wan-small 256x256; Wan folders 832x480)");
  cmd->add_option("--frames", a->frames,
                  "Wan: video frames (default: wan-small 17, the other builtins and folders 81)");
  cmd->add_option("--repeat", a->repeat, "timed generations per combination (default 3)");
  cmd->add_option("--warmup", a->warmup, "untimed 1-step generations first (default 1)");
  cmd->add_option("--prompt", a->prompt, "prompt for folder models");
  cmd->add_option("--lora", a->loras,
                  "LoRA FILE[:scale] (repeatable) for the combinations with +lora (e.g. \"bf16+lora; bf16+nf4+lora\")");
  cmd->add_option("--device", a->device, "where the pipelines run: cpu (default) | cuda | cuda:N");
  cmd->add_option("--threads", a->threads, "CPU threads (default: all)")->check(CLI::Range(1, 1024));
  cmd->add_flag("--json", a->json, "print JSON instead of the table");
  cmd->add_flag("--quality", a->quality,
                "compare each combination's output (same seed) with the unquantized, uncached one (the first fp32 "
                "combination without quantization or cache, else the first without): PSNR and SSIM, on the pixels "
                "(folders) or the latents (builtins: no VAE); LPIPS is not computed (it needs a trained network)");
  cmd->add_flag("--worker", a->worker)->group("");  // internal: run one combination in this process
  cmd->add_option("--combo", a->combo)->group("");
  cmd->add_option("--quality-out", a->quality_out)->group("");  // internal: the worker's output for --quality
  cmd->callback([a] { run(*a); });
}

}  // namespace diffq::cli
