// diffq generate: text -> image (FluxPipeline folders) or video (WanPipeline folders), through diffq's public
// API (include/diffq/pipeline.h); the folder's model_index.json picks the pipeline. Default model: the bundled
// demo model models/demo-flux (trained to draw coloured shapes), so the command works on a fresh clone.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "commands.h"
#include "diffq/pipeline.h"
#include "generate_args.h"
#include "lora_options.h"
#include "generate_request.h"
#include "progress.h"
#include "compile_report.h"
#include "diffq/error.h"
#include "diffq/memory.h"
#include "diffq/runtime.h"
#include "quant_options.h"

namespace diffq::cli {

namespace {


// "1, 0.75,0.5" -> {1, 0.75, 0.5}; each item must be a whole number.
std::vector<double> parse_sigmas(const std::string& text) {
  std::vector<double> v;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t end = std::min(text.find(',', start), text.size());
    std::string item = text.substr(start, end - start);
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    char* stop = nullptr;
    const double x = item.empty() ? 0.0 : std::strtod(item.c_str(), &stop);
    check(!item.empty() && stop == item.c_str() + item.size() && std::isfinite(x), "generate",
          "--sigmas: '", item, "' (item ", v.size() + 1, " of '", text, "') is not a number");
    v.push_back(x);
    start = end + 1;
  }
  return v;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void run(const GenerateArgs& args) {
  using clock = std::chrono::steady_clock;
  GenerateArgs a = args;
  const std::filesystem::path model = a.model.empty() ? app::default_model_folder() : std::filesystem::path(a.model);
  a.model = model.string();
  if (a.threads > 0) set_num_threads(a.threads);
  const bool tty = isatty(STDERR_FILENO) && !a.json;
  const DType dtype = parse_dtype(a.dtype);
  check(dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f16, "generate",
        "--dtype must be float32, bfloat16 or float16, got '", a.dtype, "'");
  check(a.output_type == "image" || a.output_type == "latent", "generate", "--output-type must be image or latent, got '",
        a.output_type, "'");
  check(!a.autotune || !a.compile.empty(), "generate", "--autotune tunes a compiled transformer: give --compile full|regional too");
  check(a.compile_mode == "default" || !a.compile.empty(), "generate", "--mode ", a.compile_mode,
        " is a compile mode: give --compile full|regional too");
  check(!(a.autotune && a.compile_mode == "reduce-overhead"), "generate",
        "--autotune is --mode max-autotune: it cannot be combined with --mode reduce-overhead");
  check(a.offload.empty() || a.max_memory.empty(), "generate", "give --offload or --max-memory, not both");
  check(!a.offload_drop_cache || !a.offload.empty(), "generate", "--offload-drop-cache needs --offload group[:N]|leaf|disk");
  // The folder's model_index.json decides the pipeline (Diffusers' DiffusionPipeline.from_pretrained).
  const bool video = DiffusionPipeline::pipeline_class_of(model) == "WanPipeline";
  check_output_args(a, video);
  // The flags as a request: the mapping (defaults, validation) is the server's too (apps/common).
  app::GenerateRequest request;
  request.prompt = a.prompt;
  request.prompt_2 = a.prompt_2;
  request.negative_prompt = a.negative;
  request.negative_prompt_2 = a.negative_2;
  request.width = a.width;
  request.height = a.height;
  request.frames = a.frames;
  if (a.steps_given) request.steps = a.steps;
  if (!a.sigmas.empty()) request.sigmas = parse_sigmas(a.sigmas);
  if (a.guidance_given) request.guidance = a.guidance;
  if (a.guidance_2_given) request.guidance_2 = a.guidance_2;
  if (a.true_cfg_given) request.true_cfg = a.true_cfg;
  if (a.max_seq_given) request.max_sequence_length = a.max_seq;
  request.n = a.num_images;
  request.seed = a.seed;
  // Messages name the flags; checked before loading, so a bad request costs no load.
  const app::FieldLabel flag = [](const std::string& f) {
    static const std::map<std::string, std::string> flags = {
        {"prompt_2", "--prompt-2"}, {"negative_prompt", "--negative"}, {"negative_prompt_2", "--negative-2"},
        {"true_cfg", "--true-cfg"}, {"guidance_2", "--guidance-2"}, {"n", "--num-images"},
        {"max_sequence_length", "--max-sequence-length"}};
    const auto it = flags.find(f);
    return it != flags.end() ? it->second : "--" + f;
  };
  (void)app::to_generate_params(request, video, app::RequestLimits::wide_open(), flag);
  check(!a.lora_lenient || !(a.loras.empty() && a.loras_2.empty()), "generate", "--lora-lenient needs --lora FILE");
  check(!a.fuse_lora || !(a.loras.empty() && a.loras_2.empty()), "generate", "--fuse-lora needs --lora FILE");
  for (const auto& l : a.loras) parse_lora_arg(l);  // a missing file costs no load
  for (const auto& l : a.loras_2) parse_lora_arg(l);

  nlohmann::json timings;
  auto t0 = clock::now();
  PipelineOptions po;
  po.dtype = dtype;
  po.transformer_file = a.transformer_file;
  po.device = Device::parse(a.device);
  po.quantization_config_json = cli_quantization_config(a.quant, a.quant_config, a.quantize, dtype);
  auto pipe = DiffusionPipeline::from_pretrained(model, po);
  // LoRAs before offloading (fuse refuses offloaded weights) and before compiling (the graph reads them).
  const nlohmann::json loras = apply_loras(*pipe, a.loras, a.loras_2, a.lora_lenient, a.fuse_lora, a.json);
  timings["load_s"] = seconds_since(t0);
  std::string offload_plan;
  if (!a.offload.empty()) {
    offload_plan = pipe->enable_offload(a.offload, a.offload_drop_cache);
  } else if (!a.max_memory.empty()) {
    offload_plan = pipe->enable_memory_budget(a.max_memory, a.max_host_memory);
    if (!a.json) std::fprintf(stderr, "offload plan: %s\n", offload_plan.c_str());
  }
  if (!a.compile.empty())
    pipe->compile(a.compile, a.autotune || a.compile_mode == "max-autotune", a.compile_mode == "reduce-overhead");  // after offloading, so its hooks are seen
  if (!a.cache.empty()) pipe->enable_cache(parse_cache_spec(a.cache));
  if (!a.json)
    for (const auto& [c, q] : pipe->quantization()) std::fprintf(stderr, "quantized %s: %s\n", c.c_str(), q.c_str());

  GenerateParams p = app::to_generate_params(request, video, app::RequestLimits::wide_open(), flag);
  if (!a.latents_in.empty()) p.latents = load_latents(a.latents_in);
  p.output_latents_only = a.output_type == "latent";
  p.on_step = progress_bar(tty);
  GenerateResult r = pipe->generate(p);
  if (tty) std::fputc('\n', stderr);
  timings["encode_prompt_s"] = r.encode_prompt_s;
  timings["denoise_s"] = r.denoise_s;
  timings["decode_s"] = r.decode_s;
  timings["denoise_and_decode_s"] = r.denoise_s + r.decode_s;

  t0 = clock::now();
  if (!a.latents_out.empty()) save_latents(a.latents_out, r.latents);
  const std::vector<std::string> outputs = write_outputs(a, r, video);
  timings["write_s"] = seconds_since(t0);

  const GenerateParams& u = r.used;
  const auto report = compile_report(pipe->compile_report());
  if (a.json) {
    nlohmann::json j = {{"output", outputs.size() == 1 ? nlohmann::json(outputs[0]) : nlohmann::json(outputs)},
                        {"pipeline", pipe->class_name()}, {"model", model.string()}, {"prompt", a.prompt},
                        {video ? "num_videos" : "num_images", a.num_images}, {"seed", a.seed},
                        {"steps", r.steps_run}, {"width", u.width}, {"height", u.height},
                        {"guidance", *u.guidance_scale}, {"dtype", a.dtype}, {"threads", num_threads()},
                        {"timings", timings}, {"peak_cpu_bytes", memory_stats(Device::cpu()).peak_bytes},
                        {"peak_rss_bytes", process_peak_rss_bytes()}, {"quantization", pipe->quantization()},
                        {"offload", offload_plan}, {"compile", a.compile}, {"autotune", a.autotune || a.compile_mode == "max-autotune"},
                        {"compile_mode", a.compile_mode},
                        {"compile_stats", report}};
    j["device"] = pipe->device().str();
    if (!pipe->device().is_cpu()) j["peak_device_bytes"] = memory_stats(pipe->device()).peak_bytes;
    j["max_sequence_length"] = u.max_sequence_length;
    if (u.true_cfg_scale) j["true_cfg"] = *u.true_cfg_scale;
    if (video) {
      j["num_frames"] = u.num_frames;
      j["fps"] = a.fps;
      if (u.guidance_scale_2) j["guidance_2"] = *u.guidance_scale_2;
    }
    if (!a.transformer_file.empty()) j["transformer_file"] = a.transformer_file;
    if (!a.cache.empty()) {
      const CacheReport& c = r.cache;
      nlohmann::json steps = nlohmann::json::array();
      for (const auto& s : c.steps)
        steps.push_back({{"model", s.model}, {"context", s.context}, {"index", s.index}, {"computed", s.computed}});
      j["cache"] = {{"method", c.method}, {"computed", c.computed}, {"skipped", c.skipped},
                    {"skipped_range", c.skipped_range}, {"always_run", c.always_run}, {"steps", steps}};
      if (!c.note.empty()) j["cache"]["note"] = c.note;
      if (!c.calibration_ratios.empty()) j["cache"]["calibration_ratios"] = c.calibration_ratios;
    }
    if (!loras.is_null()) j["lora"] = loras;
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    for (const auto& o : outputs) std::fprintf(stderr, "wrote %s\n", o.c_str());
    if (!a.compile.empty()) std::fprintf(stderr, "%s\n", compile_report_line(report).c_str());
    if (!a.cache.empty()) {
      std::fprintf(stderr, "cache %s: %lld transformer calls computed, %lld skipped (a skip skips %s)\n",
                   r.cache.method.c_str(), (long long)r.cache.computed, (long long)r.cache.skipped,
                   r.cache.skipped_range.c_str());
      if (!r.cache.note.empty()) std::fprintf(stderr, "cache note: %s\n", r.cache.note.c_str());
      if (!r.cache.calibration_ratios.empty()) {
        std::string s;
        for (double v : r.cache.calibration_ratios) s += (s.empty() ? "" : ", ") + std::to_string(v);
        std::fprintf(stderr, "magcache calibration (mag_ratios): [%s]\n", s.c_str());
      }
    }
  }
  if (a.stats) {
    std::fprintf(stderr, "stats: peak allocator (cpu) %.1f MiB, peak RSS %.1f MiB\n",
                 double(memory_stats(Device::cpu()).peak_bytes) / 1048576.0,
                 double(process_peak_rss_bytes()) / 1048576.0);
    if (!pipe->device().is_cpu())
      std::fprintf(stderr, "stats: peak allocator (%s) %.1f MiB\n", pipe->device().str().c_str(),
                   double(memory_stats(pipe->device()).peak_bytes) / 1048576.0);
  }
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto a = std::make_shared<GenerateArgs>();
  auto* cmd = app.add_subcommand("generate", "Text to image (FluxPipeline) or video (WanPipeline) with a Diffusers folder");
  cmd->add_option("-m,--model", a->model,
                  "Diffusers pipeline folder: FluxPipeline or WanPipeline, as its model_index.json says (default: the "
                  "bundled demo model models/demo-flux: coloured shapes at 64x64, see its README)");
  cmd->add_option("-p,--prompt", a->prompt, "prompt")->required();
  cmd->add_option("--prompt-2", a->prompt_2, "prompt for T5 (default: the prompt)");
  cmd->add_option("-n,--negative", a->negative, "negative prompt (FLUX: used with --true-cfg > 1; Wan: CFG's, default \"\")");
  cmd->add_option("--negative-2", a->negative_2, "negative prompt for T5 (default: the negative prompt)");
  cmd->add_option("--true-cfg", a->true_cfg, "true CFG scale (1 = off)");
  cmd->add_option("--steps", a->steps, "inference steps (FLUX default 28, Wan 50)")->check(CLI::Range(1, 1000));
  cmd->add_option("--sigmas", a->sigmas,
                  "custom sigmas, comma-separated (e.g. 1,0.75,0.5,0.25): replace linspace(1, 1/steps, steps) and set the step count (Diffusers' sigmas)");
  cmd->add_option("--guidance", a->guidance, "guidance scale (FLUX default 3.5; Wan: CFG scale, default 5.0, on when > 1)");
  cmd->add_option("--guidance-2", a->guidance_2, "Wan2.2 two-expert folders: the low-noise expert's CFG scale (default: --guidance)");
  cmd->add_option("--frames", a->frames, "video: frames (Wan default 81; else N // 4 * 4 + 1 as Diffusers)")
      ->check(CLI::Range(int64_t(1), int64_t(100000)));
  cmd->add_option("--fps", a->fps, "video: frames per second of the mp4 / webp (default 16)");
  cmd->add_option("--output-frames", a->output_frames, "video: also write every frame as DIR/00000.png, 00001.png, ...");
  cmd->add_option("--seed", a->seed, "seed (torch.Generator('cpu').manual_seed)");
  cmd->add_option("--width", a->width, "width (default: FLUX 128 x the VAE scale factor = 1024; Wan 832)")->check(CLI::Range(int64_t(1), int64_t(16384)));
  cmd->add_option("--height", a->height, "height (default: as width)")->check(CLI::Range(int64_t(1), int64_t(16384)));
  cmd->add_option("--max-sequence-length", a->max_seq, "T5 tokens (default 512, at most 512)");
  cmd->add_option("--dtype", a->dtype, "compute dtype: float32 | bfloat16 | float16");
  cmd->add_option("--device", a->device,
                  "where the pipeline runs: cpu (default) | cuda | cuda:N (weights uploaded once at load)");
  cmd->add_option("-o,--output", a->output,
                  "output PNG (default out.png; with --num-images N: <stem>-0.png ...; with --output-type latent: "
                  "a safetensors file); video pipelines: .mp4 (default out.mp4) or .webp (animated)");
  cmd->add_option("--num-images", a->num_images, "images per prompt (one batch; default 1)")->check(CLI::Range(1, 64));
  cmd->add_option("--output-type", a->output_type, "image (PNG) or latent (packed latents, safetensors)");
  cmd->add_option("--quant", a->quant,
                  "quantize while loading: nf4 | fp4 | int8 (bitsandbytes), int8wo | int4wo | int8dq | fp8wo | fp8dq "
                  "(torchao), quanto-int8|int4|int2|fp8, q8_0 | q4_0 | q4_K | q6_K ... (GGUF types)");
  cmd->add_option("--quant-config", a->quant_config,
                  "PipelineQuantizationConfig as JSON (quant_backend/quant_kwargs/components_to_quantize or quant_mapping)");
  cmd->add_option("--quantize", a->quantize,
                  "components for --quant, comma-separated (default: every model component, as Diffusers)");
  cmd->add_option("--offload", a->offload,
                  "model | sequential | group[:N] | leaf | disk[:path] (on a CPU: weights live on disk, RAM holds "
                  "the running groups)");
  cmd->add_flag("--offload-drop-cache", a->offload_drop_cache,
                "drop the offload files' pages from the OS page cache after each read (every onload reads the disk, "
                "as when RAM cannot cache the model)");
  cmd->add_option("--max-memory", a->max_memory,
                  "memory budget (e.g. 2GiB), or auto on a GPU (its free memory now): picks the offload mode that fits");
  cmd->add_option("--max-host-memory", a->max_host_memory, "host RAM budget for offloaded weights (GPU runs)");
  cmd->add_option("--cache", a->cache,
                  "step caching: fbc[:THRESHOLD] (FirstBlockCache, 0.05) | taylorseer[:interval=5,order=1,before=3,"
                  "after=N,dtype=bf16] | magcache[:THRESHOLD][,max_skip=3,retention=0.2,steps=N,calibrate] | "
                  "teacache[:THRESHOLD] (FLUX, 0.4); see docs/cache.md");
  cmd->add_option("--compile", a->compile,
                  "compile the transformer: full (one graph) or regional (one graph per kind of repeated block)")
      ->check(CLI::IsMember({"full", "regional"}));
  cmd->add_flag("--autotune", a->autotune,
                "with --compile: max-autotune (time kernel variants on the real shapes once; the winners are kept in "
                "DIFFQ_AUTOTUNE_CACHE, else $XDG_CACHE_HOME/diffq/autotune.json, else ~/.cache/diffq/autotune.json)");
  cmd->add_option("--mode", a->compile_mode,
                  "with --compile, torch.compile's mode: default | reduce-overhead (on a GPU: each compiled graph's "
                  "kernels captured once as a CUDA graph and replayed; docs/compile.md) | max-autotune (= --autotune)")
      ->check(CLI::IsMember({"default", "reduce-overhead", "max-autotune"}));
  cmd->add_flag("--stats", a->stats, "print the allocator's peak and the process's peak RSS");
  cmd->add_option("--transformer", a->transformer_file,
                  "single-file transformer replacing the folder's: FLUX .safetensors in BFL/ComfyUI or Diffusers naming, "
                  "or a BFL-named .gguf, or a PyTorch .bin / .pt / .pth state dict; Wan .safetensors in original/ComfyUI or Diffusers naming, or a city96-style .gguf");
  cmd->add_option("--lora", a->loras,
                  "LoRA adapter FILE[:scale] (repeatable; .safetensors in Diffusers/PEFT, kohya, ComfyUI or XLabs "
                  "naming for FLUX, Diffusers/PEFT or original/ComfyUI naming for Wan; named by the file's stem; "
                  "scale default 1)");
  cmd->add_option("--lora-2", a->loras_2,
                  "Wan2.2 two-expert folders: a LoRA FILE[:scale] for the low-noise expert transformer_2 "
                  "(Diffusers' load_into_transformer_2; repeatable)");
  cmd->add_flag("--lora-lenient", a->lora_lenient,
                "load a LoRA whose keys partly match nothing in the model: the rest loads, the unmatched keys are a "
                "warning (default: an error listing them)");
  cmd->add_flag("--fuse-lora", a->fuse_lora,
                "merge the LoRAs (at their scales) into the dense weights before running (Diffusers' fuse_lora); "
                "quantized layers keep running them unfused");
  cmd->add_option("--latents", a->latents_in, "initial packed latents (safetensors, key 'latents')");
  cmd->add_option("--output-latents", a->latents_out, "also write the final packed latents (safetensors)");
  cmd->add_option("--threads", a->threads, "CPU threads (default: DIFFQ_NUM_THREADS, else all)")->check(CLI::Range(1, 1024));
  cmd->add_flag("--json", a->json, "print a JSON summary with timings and peak memory");
  cmd->callback([a, cmd] {
    a->steps_given = cmd->count("--steps") > 0;
    a->guidance_given = cmd->count("--guidance") > 0;
    a->guidance_2_given = cmd->count("--guidance-2") > 0;
    a->true_cfg_given = cmd->count("--true-cfg") > 0;
    a->max_seq_given = cmd->count("--max-sequence-length") > 0;
    run(*a);
  });
}

}  // namespace diffq::cli
