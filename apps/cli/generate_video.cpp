// diffq generate on a video pipeline folder (WanPipeline): text -> mp4 / animated WebP (+ PNG frames),
// through diffq's public API (include/diffq/pipeline.h) only.
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "diffq/error.h"
#include "diffq/memory.h"
#include "diffq/pipeline.h"
#include "diffq/runtime.h"
#include "generate_args.h"
#include "progress.h"
#include "quant_options.h"

namespace diffq::cli {

namespace {
constexpr const char* kCtx = "generate";

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int64_t peak_rss_bytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return int64_t(u.ru_maxrss) * 1024;
}

std::string lower_ext(const std::filesystem::path& p) {
  std::string e = p.extension().string();
  for (char& c : e) c = char(std::tolower(static_cast<unsigned char>(c)));
  return e;
}

// "<stem>-<i><ext>" for output i of a batch of n (the name as given when n == 1).
std::filesystem::path nth_output(const std::filesystem::path& p, int64_t i, int64_t n) {
  if (n == 1) return p;
  std::filesystem::path q = p;
  q.replace_filename(p.stem().string() + "-" + std::to_string(i) + p.extension().string());
  return q;
}
}  // namespace

void run_generate_video(const GenerateArgs& a) {
  using clock = std::chrono::steady_clock;
  if (a.threads > 0) set_num_threads(a.threads);
  const bool tty = isatty(STDERR_FILENO) && !a.json;
  const DType dtype = parse_dtype(a.dtype);
  check(dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f16, kCtx,
        "--dtype must be float32, bfloat16 or float16, got '", a.dtype, "'");
  check(a.output_type == "image" || a.output_type == "latent", kCtx, "--output-type must be image (frames) or latent, got '",
        a.output_type, "'");
  const std::filesystem::path output = a.output.empty() ? std::filesystem::path(a.output_type == "latent" ? "out.safetensors" : "out.mp4")
                                                        : std::filesystem::path(a.output);
  if (a.output_type == "latent")
    check(lower_ext(output) == ".safetensors", kCtx, "--output-type latent writes safetensors: give -o a .safetensors name, not '",
          output.string(), "'");
  else
    check(lower_ext(output) == ".mp4" || lower_ext(output) == ".webp", kCtx, "a video pipeline writes .mp4 or .webp: '",
          output.string(), "' has neither extension (--output-frames DIR also writes the frames as PNG)");
  check(a.sigmas.empty(), kCtx, "--sigmas is a FLUX option; WanPipeline has no custom sigmas");
  check(a.prompt_2.empty() && a.negative_2.empty(), kCtx, "--prompt-2 / --negative-2 are FLUX options (Wan has one text encoder)");
  check(!a.true_cfg_given, kCtx, "--true-cfg is a FLUX option; Wan's CFG is --guidance (on when > 1)");
  check(a.max_memory.empty(), kCtx, "--max-memory is not supported for video pipelines yet: give --offload MODE");
  check(a.latents_in.empty() && a.latents_out.empty(), kCtx,
        "--latents / --output-latents are not supported for video pipelines yet (--output-type latent writes the final latents)");
  check(!a.autotune || !a.compile.empty(), kCtx, "--autotune tunes a compiled transformer: give --compile full|regional too");
  check(a.fps > 0 && a.fps <= 240, kCtx, "--fps must be in (0, 240], got ", a.fps);

  nlohmann::json timings;
  auto t0 = clock::now();
  PipelineOptions po;
  po.dtype = dtype;
  po.transformer_file = a.transformer_file;
  if (auto q = cli_quantization_config(a.quant, a.quant_config, a.quantize, std::string(dtype_name(dtype))))
    po.quantization_config_json = q->to_json().dump();
  auto pipe = DiffusionPipeline::from_pretrained(a.model, po);
  if (!a.offload.empty()) pipe->enable_offload(a.offload);
  if (!a.compile.empty()) pipe->compile(a.compile, a.autotune);  // after offloading, so its hooks are seen
  timings["load_s"] = seconds_since(t0);
  if (!a.json)
    for (const auto& [c, q] : pipe->quantization()) std::fprintf(stderr, "quantized %s: %s\n", c.c_str(), q.c_str());

  GenerateParams p;
  p.prompt = a.prompt;
  p.negative_prompt = a.negative;
  p.width = a.width;
  p.height = a.height;
  p.num_frames = a.frames;
  if (a.steps_given) p.num_inference_steps = a.steps;
  if (a.guidance_given) p.guidance_scale = a.guidance;
  if (a.guidance_2_given) p.guidance_scale_2 = a.guidance_2;
  if (a.max_seq_given) p.max_sequence_length = a.max_seq;
  p.num_outputs = a.num_images;
  p.seed = a.seed;
  p.output_latents_only = a.output_type == "latent";
  p.on_step = progress_bar(tty);
  t0 = clock::now();
  GenerateResult r = pipe->generate(p);
  if (tty) std::fputc('\n', stderr);
  timings["generate_s"] = seconds_since(t0);

  std::vector<std::string> outputs;
  const GenerateParams& u = r.used;
  if (p.output_latents_only) {
    save_latents(output, r.latents);
    outputs.push_back(output.string());
  } else {
    std::map<std::string, std::string> md = {
        {"prompt", a.prompt},
        {"seed", std::to_string(a.seed)},
        {"steps", std::to_string(u.num_inference_steps)},
        {"guidance", std::to_string(*u.guidance_scale)},
        {"size", std::to_string(u.width) + "x" + std::to_string(u.height)},
        {"frames", std::to_string(u.num_frames)},
        {"model", a.transformer_file.empty() ? a.model : a.model + " + " + a.transformer_file},
        {"software", std::string("diffq ") + DIFFQ_VERSION}};
    if (!a.negative.empty()) md["negative_prompt"] = a.negative;
    if (u.guidance_scale_2) md["guidance_2"] = std::to_string(*u.guidance_scale_2);
    const int64_t n = r.videos_u8.shape()[0];
    t0 = clock::now();
    for (int64_t i = 0; i < n; ++i) {
      auto m = md;
      if (n > 1) m["batch_index"] = std::to_string(i);
      const Tensor frames = r.videos_u8.select(0, i);
      const auto path = nth_output(output, i, n);
      save_video(path, frames, {.fps = a.fps, .metadata = m});
      outputs.push_back(path.string());
      if (!a.output_frames.empty()) {
        const std::filesystem::path dir = n == 1 ? std::filesystem::path(a.output_frames)
                                                 : std::filesystem::path(a.output_frames) / std::to_string(i);
        save_frames(dir, frames, m);
        outputs.push_back(dir.string() + "/");
      }
    }
    timings["write_s"] = seconds_since(t0);
  }

  if (a.json) {
    nlohmann::json j = {{"output", outputs.size() == 1 ? nlohmann::json(outputs[0]) : nlohmann::json(outputs)},
                        {"pipeline", pipe->class_name()}, {"model", a.model}, {"prompt", a.prompt},
                        {"num_videos", a.num_images}, {"seed", a.seed}, {"steps", r.steps_run},
                        {"width", u.width}, {"height", u.height}, {"num_frames", u.num_frames},
                        {"fps", a.fps}, {"guidance", *u.guidance_scale}, {"dtype", a.dtype},
                        {"threads", num_threads()}, {"timings", timings},
                        {"peak_cpu_bytes", memory_stats(Device::cpu()).peak_bytes},
                        {"peak_rss_bytes", peak_rss_bytes()}, {"quantization", pipe->quantization()},
                        {"offload", a.offload}, {"compile", a.compile}};
    if (!a.transformer_file.empty()) j["transformer_file"] = a.transformer_file;
    if (u.guidance_scale_2) j["guidance_2"] = *u.guidance_scale_2;
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    for (const auto& o : outputs) std::fprintf(stderr, "wrote %s\n", o.c_str());
  }
  if (a.stats)
    std::fprintf(stderr, "stats: peak allocator (cpu) %.1f MiB, peak RSS %.1f MiB\n",
                 double(memory_stats(Device::cpu()).peak_bytes) / 1048576.0, double(peak_rss_bytes()) / 1048576.0);
}

}  // namespace diffq::cli
