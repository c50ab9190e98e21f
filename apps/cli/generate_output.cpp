// What `diffq generate` writes: PNG images (image pipelines), mp4 / animated WebP and PNG frame folders
// (video pipelines), or the final latents; through diffq's public API (include/diffq/pipeline.h) only.
#include <cctype>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "diffq/error.h"
#include "diffq/pipeline.h"
#include "generate_args.h"

namespace diffq::cli {

namespace {
constexpr const char* kCtx = "generate";

std::string lower_ext(const std::filesystem::path& p) {
  std::string e = p.extension().string();
  for (char& c : e) c = char(std::tolower(static_cast<unsigned char>(c)));
  return e;
}

// One output: the name as given; several: <stem>-<i><ext> (output i of the seed's batch).
std::filesystem::path nth_output(const std::filesystem::path& p, int64_t i, int64_t n) {
  if (n == 1) return p;
  std::filesystem::path q = p;
  q.replace_filename(p.stem().string() + "-" + std::to_string(i) + p.extension().string());
  return q;
}

std::string fmt(double v) { return std::to_string(v); }
}  // namespace

void check_output_args(GenerateArgs& a, bool video) {
  if (a.output.empty()) a.output = a.output_type == "latent" ? "out.safetensors" : video ? "out.mp4" : "out.png";
  const std::string ext = lower_ext(a.output);
  if (a.output_type == "latent") {
    check(ext == ".safetensors", kCtx, "--output-type latent writes safetensors: give -o a .safetensors name, not '",
          a.output, "'");
  } else if (video) {
    check(ext == ".mp4" || ext == ".webp", kCtx, "a video pipeline writes .mp4 or .webp: '", a.output,
          "' has neither extension (--output-frames DIR also writes the frames as PNG)");
  }
  // The generation parameters' own checks (FLUX-only / video-only options) are in apps/common/generate_request.
  if (video) {
    check(a.fps > 0 && a.fps <= 240, kCtx, "--fps must be in (0, 240], got ", a.fps);
  } else {
    check(a.output_frames.empty(), kCtx, "--output-frames is for video pipelines; ", a.model, " is an image pipeline");
  }
}

std::vector<std::string> write_outputs(const GenerateArgs& a, const GenerateResult& r, bool video) {
  std::vector<std::string> outputs;
  if (a.output_type == "latent") {
    save_latents(a.output, r.latents);
    return {a.output};
  }
  const GenerateParams& u = r.used;
  std::vector<std::pair<std::string, std::string>> md = {
      {"prompt", a.prompt},
      {"seed", std::to_string(a.seed)},
      {"steps", std::to_string(u.num_inference_steps)},
      {"guidance", fmt(*u.guidance_scale)},
      {"size", std::to_string(u.width) + "x" + std::to_string(u.height)},
      {"model", a.transformer_file.empty() ? a.model : a.model + " + " + a.transformer_file},
      {"software", std::string("diffq ") + DIFFQ_VERSION}};
  if (video) md.emplace_back("frames", std::to_string(u.num_frames));
  if (!a.prompt_2.empty()) md.emplace_back("prompt_2", a.prompt_2);
  if (!a.negative.empty()) md.emplace_back("negative_prompt", a.negative);
  if (!a.negative_2.empty()) md.emplace_back("negative_prompt_2", a.negative_2);
  if (u.guidance_scale_2) md.emplace_back("guidance_2", fmt(*u.guidance_scale_2));
  if (u.true_cfg_scale && *u.true_cfg_scale > 1.0) md.emplace_back("true_cfg_scale", fmt(*u.true_cfg_scale));
  if (!a.sigmas.empty()) md.emplace_back("sigmas", a.sigmas);
  std::string loras;  // the --lora arguments as given ("style.safetensors:0.8, ...")
  for (const auto& l : a.loras) loras += (loras.empty() ? "" : ", ") + l;
  for (const auto& l : a.loras_2) loras += (loras.empty() ? "" : ", ") + l + " (transformer_2)";
  if (!loras.empty()) md.emplace_back(a.fuse_lora ? "lora (fused)" : "lora", loras);

  const Tensor& all = video ? r.videos_u8 : r.images_u8;
  const int64_t n = all.shape()[0];
  for (int64_t i = 0; i < n; ++i) {
    auto m = md;
    if (n > 1) m.emplace_back("batch_index", std::to_string(i));
    const auto path = nth_output(a.output, i, n);
    if (!video) {
      save_image(path, all.select(0, i), m);
      outputs.push_back(path.string());
      continue;
    }
    const std::map<std::string, std::string> mm(m.begin(), m.end());
    const Tensor frames = all.select(0, i);
    save_video(path, frames, {.fps = a.fps, .metadata = mm});
    outputs.push_back(path.string());
    if (!a.output_frames.empty()) {
      const std::filesystem::path dir = n == 1 ? std::filesystem::path(a.output_frames)
                                               : std::filesystem::path(a.output_frames) / std::to_string(i);
      save_frames(dir, frames, mm);
      outputs.push_back(dir.string() + "/");
    }
  }
  return outputs;
}

}  // namespace diffq::cli
