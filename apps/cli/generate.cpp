// diffq generate: text -> image with a Diffusers FluxPipeline folder (default: the bundled tiny
// smoke-test pipeline tests/fixtures/tiny-flux, so the command works on a fresh clone).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "commands.h"
#include "diffq/pipeline.h"
#include "generate_args.h"
#include "progress.h"
#include "compile_report.h"
#include "diffq/error.h"
#include "diffq/memory.h"
#include "diffq/runtime.h"
#include "io/png.h"
#include "io/mapped_file.h"
#include "io/safetensors.h"
#include "compile/compile_options.h"
#include "offload/offload_spec.h"
#include "offload/planner.h"
#include "ops/ops.h"
#include "offload/os_memory.h"
#include "pipelines/flux_pipeline.h"
#include "quant_options.h"

namespace diffq::cli {

namespace {


std::filesystem::path default_model() {
  // build/bin/diffq -> <repo>/tests/fixtures/tiny-flux; else relative to the working directory.
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const auto p = exe.parent_path() / ".." / ".." / "tests" / "fixtures" / "tiny-flux";
    if (std::filesystem::exists(p / "model_index.json")) return std::filesystem::weakly_canonical(p);
  }
  return "tests/fixtures/tiny-flux";
}

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
  const std::filesystem::path model = a.model.empty() ? default_model() : std::filesystem::path(a.model);
  a.model = model.string();
  // The folder's model_index.json decides the pipeline (Diffusers' DiffusionPipeline.from_pretrained).
  if (DiffusionPipeline::pipeline_class_of(model) == "WanPipeline") return run_generate_video(a);
  check(a.frames == 0 && a.output_frames.empty() && !a.guidance_2_given, "generate",
        "--frames / --output-frames / --guidance-2 are for video pipelines; ", model.string(), " is a ",
        DiffusionPipeline::pipeline_class_of(model));
  if (a.output.empty()) a.output = "out.png";
  if (a.threads > 0) set_num_threads(a.threads);
  const bool tty = isatty(STDERR_FILENO) && !a.json;
  const DType dtype = parse_dtype(a.dtype);
  check(dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f16, "generate",
        "--dtype must be float32, bfloat16 or float16, got '", a.dtype, "'");
  check(a.max_seq > 0 && a.max_seq <= 512, "generate", "--max-sequence-length must be in 1..512, got ", a.max_seq);
  check(a.output_type == "image" || a.output_type == "latent", "generate", "--output-type must be image or latent, got '",
        a.output_type, "'");
  if (a.output_type == "latent")
    check(std::filesystem::path(a.output).extension() == ".safetensors", "generate",
          "--output-type latent writes safetensors: give -o a .safetensors name, not '", a.output, "'");
  const std::vector<double> sigmas = a.sigmas.empty() ? std::vector<double>{} : parse_sigmas(a.sigmas);
  check(sigmas.empty() || !a.steps_given || int64_t(sigmas.size()) == a.steps, "generate", "--sigmas gives ",
        sigmas.size(), " steps but --steps says ", a.steps, " (leave --steps out with --sigmas)");
  const int64_t steps = sigmas.empty() ? a.steps : int64_t(sigmas.size());
  check(!a.autotune || !a.compile.empty(), "generate", "--autotune tunes a compiled transformer: give --compile full|regional too");
  nlohmann::json timings;
  auto t0 = clock::now();
  FluxPipelineLoadOptions lo;
  lo.transformer_file = a.transformer_file;
  lo.quantization_config = cli_quantization_config(a.quant, a.quant_config, a.quantize, std::string(dtype_name(dtype)));
  auto pipe = FluxPipeline::from_pretrained(model, dtype, lo);
  timings["load_s"] = seconds_since(t0);
  check(a.offload.empty() || a.max_memory.empty(), "generate", "give --offload or --max-memory, not both");
  check(!a.offload_drop_cache || !a.offload.empty(), "generate", "--offload-drop-cache needs --offload group[:N]|leaf|disk");
  std::string offload_plan;
  if (!a.offload.empty()) {
    auto spec = offload::parse_offload_spec(a.offload);
    spec.drop_page_cache = a.offload_drop_cache;
    offload::apply(pipe->offloader, pipe->offload_components(), FluxPipeline::model_cpu_offload_seq, spec);
    offload_plan = spec.str();
  } else if (!a.max_memory.empty()) {
    offload::MemoryBudget b;
    b.max_memory = offload::parse_size(a.max_memory);
    if (!a.max_host_memory.empty()) b.max_host_memory = offload::parse_size(a.max_host_memory);
    const auto plan = offload::plan_memory(offload::measure_footprints(pipe->offload_components()), b);
    if (!a.json) std::fprintf(stderr, "offload plan: %s\n", plan.str().c_str());
    offload::apply(pipe->offloader, pipe->offload_components(), FluxPipeline::model_cpu_offload_seq, plan.spec);
    offload_plan = plan.str();
  }
  if (!a.compile.empty()) {  // after offloading, so its hooks are seen by the capture
    if (a.compile == "full") pipe->transformer->compile(cli_compile_options(a.autotune));
    else pipe->transformer->compile_repeated_blocks(cli_compile_options(a.autotune));
  }
  if (!pipe->quantization.empty() && !a.json)
    for (const auto& [c, q] : pipe->quantization) std::fprintf(stderr, "quantized %s: %s\n", c.c_str(), q.c_str());

  // Prompts are encoded here (not inside the call) so that the timing of each stage is reported.
  t0 = clock::now();
  FluxCallOptions o;
  auto pos = pipe->encode_prompt({a.prompt}, a.prompt_2.empty() ? std::vector<std::string>{}
                                                                : std::vector<std::string>{a.prompt_2},
                                 a.max_seq);
  const int64_t n = a.num_images;
  auto repeat = [n](const Tensor& t) { return ops::repeat_interleave(t, n, 0); };
  o.prompt_embeds = repeat(pos.prompt_embeds);
  o.pooled_prompt_embeds = repeat(pos.pooled_prompt_embeds);
  if (a.true_cfg > 1.0 && !a.negative.empty()) {
    auto neg = pipe->encode_prompt({a.negative}, a.negative_2.empty() ? std::vector<std::string>{}
                                                                     : std::vector<std::string>{a.negative_2},
                                   a.max_seq);
    o.negative_prompt_embeds = repeat(neg.prompt_embeds);
    o.negative_pooled_prompt_embeds = repeat(neg.pooled_prompt_embeds);
  }
  o.true_cfg_scale = a.true_cfg;
  o.output_type = a.output_type;
  timings["encode_prompt_s"] = seconds_since(t0);

  // Diffusers: height/width default to default_sample_size (128) * vae_scale_factor (1024 for FLUX.1).
  const int64_t default_size = 128 * pipe->vae_scale_factor();
  const int64_t width = a.width > 0 ? a.width : default_size, height = a.height > 0 ? a.height : default_size;
  o.height = height;
  o.width = width;
  o.num_inference_steps = steps;
  if (!sigmas.empty()) o.sigmas = sigmas;
  o.guidance_scale = a.guidance;
  o.seed = a.seed;
  if (!a.latents_in.empty()) o.latents = io::SafetensorsFile::open(a.latents_in).tensor("latents").to(dtype);
  o.callback = progress_bar(tty);
  t0 = clock::now();
  FluxOutput out = (*pipe)(o);
  if (tty) std::fputc('\n', stderr);
  timings["denoise_and_decode_s"] = seconds_since(t0);

  if (!a.latents_out.empty()) io::save_safetensors(a.latents_out, io::StateDict{{"latents", out.latents}}, std::nullopt);
  std::vector<std::string> outputs;
  if (a.output_type == "latent") {
    io::save_safetensors(a.output, io::StateDict{{"latents", out.latents}}, std::nullopt);
    outputs.push_back(a.output);
  } else {
    io::PngText text = {{"prompt", a.prompt},
                        {"seed", std::to_string(a.seed)},
                        {"steps", std::to_string(steps)},
                        {"guidance", std::to_string(a.guidance)},
                        {"size", std::to_string(width) + "x" + std::to_string(height)},
                        {"model", a.transformer_file.empty() ? model.string()
                                                             : model.string() + " + " + a.transformer_file},
                        {"software", std::string("diffq ") + DIFFQ_VERSION}};
    if (!a.prompt_2.empty()) text.emplace_back("prompt_2", a.prompt_2);
    if (!a.negative.empty()) text.emplace_back("negative_prompt", a.negative);
    if (!a.negative_2.empty()) text.emplace_back("negative_prompt_2", a.negative_2);
    if (a.true_cfg > 1.0) text.emplace_back("true_cfg_scale", std::to_string(a.true_cfg));
    if (!sigmas.empty()) text.emplace_back("sigmas", a.sigmas);
    for (int64_t i = 0; i < n; ++i) {
      // One image: the name as given; several: <stem>-<i><ext> (image i of the seed's batch).
      std::filesystem::path p = a.output;
      if (n > 1) p.replace_filename(p.stem().string() + "-" + std::to_string(i) + p.extension().string());
      io::PngText t = text;
      if (n > 1) t.emplace_back("batch_index", std::to_string(i));
      io::write_png(p, out.image_u8.slice(0, i, i + 1).contiguous(), t);
      outputs.push_back(p.string());
    }
  }

  if (a.json) {
    nlohmann::json j = {{"output", outputs.size() == 1 ? nlohmann::json(outputs[0]) : nlohmann::json(outputs)},
                        {"model", model.string()}, {"prompt", a.prompt}, {"num_images", n},
                        {"seed", a.seed}, {"steps", out.steps_run}, {"width", width},
                        {"height", height}, {"guidance", a.guidance}, {"dtype", a.dtype},
                        {"threads", num_threads()}, {"timings", timings},
                        {"peak_cpu_bytes", memory_stats(Device::cpu()).peak_bytes},
                        {"peak_rss_bytes", offload::peak_rss_bytes()},
                        {"quantization", pipe->quantization},
                        {"offload", offload_plan}, {"compile", a.compile},
                        {"autotune", a.autotune}, {"compile_stats", compile_report(*pipe->transformer, a.autotune)}};
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    for (const auto& p : outputs) std::fprintf(stderr, "wrote %s\n", p.c_str());
    if (!a.compile.empty())
      std::fprintf(stderr, "%s\n", compile_report_line(compile_report(*pipe->transformer, a.autotune)).c_str());
  }
  if (a.stats)
    std::fprintf(stderr, "stats: peak allocator (cpu) %s, peak RSS %s\n",
                 io::format_bytes(memory_stats(Device::cpu()).peak_bytes).c_str(),
                 io::format_bytes(uint64_t(offload::peak_rss_bytes())).c_str());
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto a = std::make_shared<GenerateArgs>();
  auto* cmd = app.add_subcommand("generate", "Text to image (FluxPipeline) or video (WanPipeline) with a Diffusers folder");
  cmd->add_option("-m,--model", a->model,
                  "Diffusers pipeline folder: FluxPipeline or WanPipeline, as its model_index.json says (default: the "
                  "bundled tiny smoke-test FLUX model)");
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
  cmd->add_option("--max-memory", a->max_memory, "memory budget (e.g. 2GiB): picks the offload mode that fits");
  cmd->add_option("--max-host-memory", a->max_host_memory, "host RAM budget for offloaded weights (GPU runs)");
  cmd->add_option("--compile", a->compile,
                  "compile the transformer: full (one graph) or regional (one graph per kind of repeated block)")
      ->check(CLI::IsMember({"full", "regional"}));
  cmd->add_flag("--autotune", a->autotune,
                "with --compile: max-autotune (time kernel variants on the real shapes once; the winners are kept in "
                "DIFFQ_AUTOTUNE_CACHE, else $XDG_CACHE_HOME/diffq/autotune.json, else ~/.cache/diffq/autotune.json)");
  cmd->add_flag("--stats", a->stats, "print the allocator's peak and the process's peak RSS");
  cmd->add_option("--transformer", a->transformer_file,
                  "single-file transformer replacing the folder's: FLUX .safetensors in BFL/ComfyUI or Diffusers naming, "
                  "or a BFL-named .gguf; Wan .safetensors in original/ComfyUI or Diffusers naming, or a city96-style .gguf");
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
