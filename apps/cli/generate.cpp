// diffq generate: text -> image with a Diffusers FluxPipeline folder (default: the bundled tiny
// smoke-test pipeline tests/fixtures/tiny-flux, so the command works on a fresh clone).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "commands.h"
#include "diffq/error.h"
#include "diffq/memory.h"
#include "diffq/runtime.h"
#include "io/png.h"
#include "io/safetensors.h"
#include "pipelines/flux_pipeline.h"

namespace diffq::cli {

namespace {

struct GenerateArgs {
  std::string model, prompt, prompt_2, negative, output = "out.png", latents_in, latents_out, dtype = "float32";
  double true_cfg = 1.0, guidance = 3.5;
  int64_t steps = 28, width = 0, height = 0, max_seq = 512;  // 0: Diffusers' default size
  int threads = 0;
  uint64_t seed = 0;
  bool json = false;
};

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

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void run(const GenerateArgs& a) {
  using clock = std::chrono::steady_clock;
  if (a.threads > 0) set_num_threads(a.threads);
  const bool tty = isatty(STDERR_FILENO) && !a.json;
  const std::filesystem::path model = a.model.empty() ? default_model() : std::filesystem::path(a.model);
  const DType dtype = parse_dtype(a.dtype);
  check(dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f16, "generate",
        "--dtype must be float32, bfloat16 or float16, got '", a.dtype, "'");
  check(a.max_seq > 0 && a.max_seq <= 512, "generate", "--max-sequence-length must be in 1..512, got ", a.max_seq);
  nlohmann::json timings;
  auto t0 = clock::now();
  auto pipe = FluxPipeline::from_pretrained(model, dtype);
  timings["load_s"] = seconds_since(t0);

  t0 = clock::now();
  FluxCallOptions o;
  auto pos = pipe->encode_prompt({a.prompt}, a.prompt_2.empty() ? std::vector<std::string>{}
                                                                : std::vector<std::string>{a.prompt_2},
                                 a.max_seq);
  o.prompt_embeds = pos.prompt_embeds;
  o.pooled_prompt_embeds = pos.pooled_prompt_embeds;
  if (a.true_cfg > 1.0 && !a.negative.empty()) {
    auto neg = pipe->encode_prompt({a.negative}, {}, a.max_seq);
    o.negative_prompt_embeds = neg.prompt_embeds;
    o.negative_pooled_prompt_embeds = neg.pooled_prompt_embeds;
  }
  o.true_cfg_scale = a.true_cfg;
  timings["encode_prompt_s"] = seconds_since(t0);

  // Diffusers: height/width default to default_sample_size (128) * vae_scale_factor (1024 for FLUX.1).
  const int64_t default_size = 128 * pipe->vae_scale_factor();
  const int64_t width = a.width > 0 ? a.width : default_size, height = a.height > 0 ? a.height : default_size;
  o.height = height;
  o.width = width;
  o.num_inference_steps = a.steps;
  o.guidance_scale = a.guidance;
  o.seed = a.seed;
  if (!a.latents_in.empty()) o.latents = io::SafetensorsFile::open(a.latents_in).tensor("latents").to(dtype);
  const auto t_loop = clock::now();
  o.callback = [&](int64_t step, int64_t total, float) {
    if (tty) {
      const double el = seconds_since(t_loop), per = el / double(step + 1);
      std::fprintf(stderr, "\r[%-30s] step %lld/%lld  %.2f s/it  ETA %.1f s ",
                   std::string(size_t(30 * (step + 1) / total), '#').c_str(), (long long)(step + 1),
                   (long long)total, per, per * double(total - step - 1));
      std::fflush(stderr);
    }
    return true;
  };
  t0 = clock::now();
  FluxOutput out = (*pipe)(o);
  if (tty) std::fputc('\n', stderr);
  timings["denoise_and_decode_s"] = seconds_since(t0);

  if (!a.latents_out.empty()) io::save_safetensors(a.latents_out, io::StateDict{{"latents", out.latents}}, std::nullopt);
  io::PngText text = {{"prompt", a.prompt},
                      {"seed", std::to_string(a.seed)},
                      {"steps", std::to_string(a.steps)},
                      {"guidance", std::to_string(a.guidance)},
                      {"size", std::to_string(width) + "x" + std::to_string(height)},
                      {"model", model.string()},
                      {"software", std::string("diffq ") + DIFFQ_VERSION}};
  if (!a.prompt_2.empty()) text.emplace_back("prompt_2", a.prompt_2);
  if (!a.negative.empty()) text.emplace_back("negative_prompt", a.negative);
  io::write_png(a.output, out.image_u8, text);

  if (a.json) {
    nlohmann::json j = {{"output", a.output}, {"model", model.string()}, {"prompt", a.prompt},
                        {"seed", a.seed}, {"steps", out.steps_run}, {"width", width},
                        {"height", height}, {"guidance", a.guidance}, {"dtype", a.dtype},
                        {"threads", num_threads()}, {"timings", timings},
                        {"peak_cpu_bytes", memory_stats(Device::cpu()).peak_bytes}};
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::fprintf(stderr, "wrote %s\n", a.output.c_str());
  }
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto a = std::make_shared<GenerateArgs>();
  auto* cmd = app.add_subcommand("generate", "Text to image with a FLUX.1 Diffusers pipeline folder");
  cmd->add_option("-m,--model", a->model, "Diffusers FluxPipeline folder (default: the bundled tiny smoke-test model)");
  cmd->add_option("-p,--prompt", a->prompt, "prompt")->required();
  cmd->add_option("--prompt-2", a->prompt_2, "prompt for T5 (default: the prompt)");
  cmd->add_option("-n,--negative", a->negative, "negative prompt (used with --true-cfg > 1)");
  cmd->add_option("--true-cfg", a->true_cfg, "true CFG scale (1 = off)");
  cmd->add_option("--steps", a->steps, "inference steps (default 28)")->check(CLI::Range(1, 1000));
  cmd->add_option("--guidance", a->guidance, "guidance scale (default 3.5)");
  cmd->add_option("--seed", a->seed, "seed (torch.Generator('cpu').manual_seed)");
  cmd->add_option("--width", a->width, "width (default: 128 x the VAE scale factor, 1024 for FLUX.1)")->check(CLI::Range(int64_t(1), int64_t(16384)));
  cmd->add_option("--height", a->height, "height (default: as width)")->check(CLI::Range(int64_t(1), int64_t(16384)));
  cmd->add_option("--max-sequence-length", a->max_seq, "T5 tokens (default 512, at most 512)");
  cmd->add_option("--dtype", a->dtype, "compute dtype: float32 | bfloat16 | float16");
  cmd->add_option("-o,--output", a->output, "output PNG (default out.png)");
  cmd->add_option("--latents", a->latents_in, "initial packed latents (safetensors, key 'latents')");
  cmd->add_option("--output-latents", a->latents_out, "also write the final packed latents (safetensors)");
  cmd->add_option("--threads", a->threads, "CPU threads (default: DIFFQ_NUM_THREADS, else all)")->check(CLI::Range(1, 1024));
  cmd->add_flag("--json", a->json, "print a JSON summary with timings and peak memory");
  cmd->callback([a] { run(*a); });
}

}  // namespace diffq::cli
