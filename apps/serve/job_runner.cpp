#include "job_runner.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <fstream>

#include "base64.h"
#include "diffq/error.h"
#include "model_registry.h"

namespace diffq::serve {

namespace {
using clock = std::chrono::steady_clock;
double secs(clock::time_point a, clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// The job's adapters, and only those, active on the (shared, kept loaded) pipeline with the job's scales; a
// name not loaded yet is loaded from its file and stays loaded for later jobs.
void use_loras(DiffusionPipeline& pipe, const std::vector<Job::Lora>& loras) {
  if (loras.empty() && pipe.loras().empty()) return;
  std::vector<std::string> names;
  std::vector<double> scales;
  for (const auto& l : loras) {
    const auto loaded = pipe.loras();
    if (std::none_of(loaded.begin(), loaded.end(), [&](const auto& i) { return i.name == l.name; }))
      pipe.load_lora(l.file, l.name, l.scale);
    names.push_back(l.name);
    scales.push_back(l.scale);
  }
  pipe.set_adapters(names, scales);
}

// Written to a temporary of its own beside `path` (two workers that run the same job never share one), then
// renamed into place: no reader ever sees half a file.
void write_atomically(const std::filesystem::path& path, const std::vector<uint8_t>& bytes) {
  static std::atomic<uint64_t> n{0};
  const auto tmp = path.parent_path() / cat(".", path.filename().string(), ".tmp.", ::getpid(), ".", n++);
  try {
    std::ofstream f(tmp, std::ios::binary);
    f.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
    f.close();
    check(bool(f), "serve", "cannot write ", tmp.string());
    std::filesystem::rename(tmp, path);
  } catch (...) {
    std::error_code ec;
    std::filesystem::remove(tmp, ec);
    throw;
  }
}
}  // namespace

RunOutput run_job_generation(ModelRegistry& models, const Job& job, const std::filesystem::path& dir,
                             bool png_metadata, const RunHooks& hooks) {
  std::shared_ptr<DiffusionPipeline> pipe = models.acquire(job.model);
  use_loras(*pipe, job.loras);
  GenerateParams p = job.params;
  const auto t_start = clock::now();
  auto t_last = t_start;
  std::string last_preview;
  p.on_step = [&](int64_t step, int64_t total, float) {
    const auto now = clock::now();
    const double el = secs(t_start, now), dt = secs(t_last, now);
    t_last = now;
    nlohmann::json d = {{"step", step + 1}, {"steps", total}, {"elapsed_s", el},
                        {"eta_s", el / double(step + 1) * double(total - step - 1)}};
    if (!last_preview.empty() && job.preview_every > 0 &&
        ((step + 1) % job.preview_every == 0 || step + 1 == total))
      d["preview"] = last_preview;
    if (hooks.on_step) hooks.on_step({"step", std::move(d)}, step + 1, total, dt);  // may throw JobCancelled
    return true;
  };
  if (job.preview_every > 0) {
    p.preview_every = job.preview_every;
    p.on_preview = [&](int64_t, const Tensor& rgb) {
      const auto png = encode_image(rgb, "png");
      last_preview = "data:image/png;base64," + base64_encode(png.data(), png.size());
      if (hooks.on_preview) hooks.on_preview(last_preview);
    };
  }
  int64_t steps = p.num_inference_steps > 0 ? p.num_inference_steps : pipe->defaults().num_inference_steps;
  if (!p.sigmas.empty()) steps = int64_t(p.sigmas.size());
  if (hooks.on_start) hooks.on_start(steps);
  GenerateResult r = pipe->generate(p);
  const auto t_gen = clock::now();
  RunOutput out;
  const bool video = job.kind == "video";
  const Tensor& all = video ? r.videos_u8 : r.images_u8;
  std::vector<std::pair<std::string, std::string>> md = {
      {"prompt", p.prompt},
      {"seed", std::to_string(p.seed)},
      {"steps", std::to_string(r.used.num_inference_steps)},
      {"size", std::to_string(r.used.width) + "x" + std::to_string(r.used.height)},
      {"model", job.model},
      {"software", std::string("diffq ") + DIFFQ_VERSION}};
  for (int64_t i = 0; i < all.size(0); ++i) {
    const std::string stem = job.id + "-" + std::to_string(i);
    if (video) {
      const auto path = dir / (stem + ".mp4");
      save_video(path, all.select(0, i), {.fps = job.fps, .metadata = {md.begin(), md.end()}});
      out.files.push_back(path);
    } else {
      const std::string ext = job.output_format == "jpeg" ? ".jpg" : "." + job.output_format;
      const auto path = dir / (stem + ext);
      if (job.output_format == "png") save_image(path, all.select(0, i), png_metadata ? md : decltype(md){});
      else write_atomically(path, encode_image(all.select(0, i), job.output_format));
      out.files.push_back(path);
    }
  }
  out.used = r.used;
  // r.used is the call as made, callbacks included, and those capture this frame's state: never keep them.
  out.used.on_step = nullptr;
  out.used.on_preview = nullptr;
  out.timings = {{"encode_prompt_s", r.encode_prompt_s}, {"denoise_s", r.denoise_s}, {"decode_s", r.decode_s},
                 {"write_s", secs(t_gen, clock::now())}};
  return out;
}

}  // namespace diffq::serve
