// WanPipeline against Diffusers' WanPipeline on the tiny folders of tools/reference/make_tiny_wan.py: a Wan2.1
// folder (UniPC, with and without CFG, negative prompts, batches, 1 / 5 / 9 frames), a Wan2.2 two-expert folder
// (boundary_ratio, guidance_scale_2) and a TI2V-5B-style folder (expand_timesteps, the 2.2 VAE). Every call of
// reference/cases.json is replayed; the final latents must match within 1e-4 (relative) and every frame within
// PSNR >= 40 dB of Diffusers' frame (output_type "np").
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <algorithm>
#include <nlohmann/json.hpp>

#include "common/error_of.h"
#include "diffq/error.h"
#include "diffq/pipeline.h"
#include "io/safetensors.h"
#include "pipelines/pipeline_test_util.h"
#include "pipelines/wan_pipeline.h"

namespace diffq {
namespace {

using diffq::testing::error_of;
using diffq::testing::rel_err;
const std::filesystem::path kFixtures = "tests/fixtures";

// PSNR (dB) of two frames in [0, 1].
double psnr_unit(const std::vector<float>& a, const std::vector<float>& b, size_t off, size_t n) {
  double se = 0;
  for (size_t i = off; i < off + n; ++i) se += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
  if (se == 0) return std::numeric_limits<double>::infinity();
  return 10 * std::log10(1.0 / (se / double(n)));
}

std::vector<std::string> as_list(const nlohmann::json& j) {
  if (j.is_string()) return {j.get<std::string>()};
  return j.get<std::vector<std::string>>();
}

WanCallOptions options_of(const nlohmann::json& c) {
  WanCallOptions o;
  o.prompt = as_list(c["prompt"]);
  if (c.contains("negative_prompt")) o.negative_prompt = as_list(c["negative_prompt"]);
  o.height = c["height"];
  o.width = c["width"];
  o.num_frames = c["num_frames"];
  o.num_inference_steps = c["num_inference_steps"];
  o.guidance_scale = c["guidance_scale"];
  if (c.contains("guidance_scale_2")) o.guidance_scale_2 = c["guidance_scale_2"].get<double>();
  if (c.contains("max_sequence_length")) o.max_sequence_length = c["max_sequence_length"];
  if (c.contains("num_videos_per_prompt")) o.num_videos_per_prompt = c["num_videos_per_prompt"];
  o.seed = c["seed"];
  return o;
}

void run_folder(const std::string& name) {
  const auto folder = kFixtures / name;
  auto pipe = WanPipeline::from_pretrained(folder, DType::f32);
  std::ifstream f(folder / "reference" / "cases.json");
  const auto cases = nlohmann::json::parse(f);
  ASSERT_FALSE(cases.empty());
  for (const auto& c : cases) {
    const std::string cname = c["name"];
    SCOPED_TRACE(name + "/" + cname);
    const auto ref = io::SafetensorsFile::open(folder / "reference" / (cname + ".safetensors"));
    const WanCallOptions o = options_of(c);

    const Tensor pe = pipe->encode_prompt(o.prompt, o.max_sequence_length);
    const Tensor ref_pe = ref.tensor("prompt_embeds");
    // Diffusers' embeddings are repeated num_videos_per_prompt times; compare the first of each.
    EXPECT_LE(rel_err(pe, ref_pe.slice(0, 0, ref_pe.shape()[0], o.num_videos_per_prompt).contiguous()), 1e-5);

    WanOutput out = (*pipe)(o);
    const double e_lat = rel_err(out.latents, ref.tensor("latents"));
    EXPECT_LE(e_lat, 1e-4);
    const Tensor ref_frames = ref.tensor("frames");  // [B, F, H, W, 3]
    ASSERT_EQ(out.frames_f32.shape(), ref_frames.shape());
    const auto a = out.frames_f32.to_f32_vector(), b = ref_frames.to_f32_vector();
    const auto& s = ref_frames.shape();
    const size_t per_frame = size_t(s[2] * s[3] * s[4]);
    double worst = std::numeric_limits<double>::infinity();
    for (size_t fr = 0; fr < size_t(s[0] * s[1]); ++fr) worst = std::min(worst, psnr_unit(a, b, fr * per_frame, per_frame));
    EXPECT_GE(worst, 40.0);
    std::printf("[%s/%s] latents rel err %.3g, worst frame PSNR %.1f dB (%lld frames)\n", name.c_str(), cname.c_str(),
                e_lat, worst, (long long)(s[0] * s[1]));
  }
}

TEST(WanPipeline, Wan21MatchesDiffusers) { run_folder("tiny-wan"); }
TEST(WanPipeline, Wan22TwoExpertsMatchDiffusers) { run_folder("tiny-wan22"); }
TEST(WanPipeline, Ti2vExpandTimestepsMatchesDiffusers) { run_folder("tiny-wan-ti2v"); }

TEST(WanPipeline, FolderSettingsAreRead) {
  auto p21 = WanPipeline::from_pretrained(kFixtures / "tiny-wan", DType::f32);
  EXPECT_FALSE(p21->boundary_ratio.has_value());
  EXPECT_FALSE(p21->expand_timesteps);
  EXPECT_EQ(p21->transformer_2, nullptr);
  EXPECT_EQ(p21->size_multiple(), 16);
  auto p22 = WanPipeline::from_pretrained(kFixtures / "tiny-wan22", DType::f32);
  ASSERT_TRUE(p22->boundary_ratio.has_value());
  EXPECT_DOUBLE_EQ(*p22->boundary_ratio, 0.875);
  EXPECT_NE(p22->transformer_2, nullptr);
  auto pti = WanPipeline::from_pretrained(kFixtures / "tiny-wan-ti2v", DType::f32);
  EXPECT_TRUE(pti->expand_timesteps);
  EXPECT_EQ(pti->size_multiple(), 32);  // spatial factor 16 x patch 2
}

TEST(WanPipeline, FramesRoundLikeDiffusersAndBadInputIsNamed) {
  auto p = WanPipeline::from_pretrained(kFixtures / "tiny-wan", DType::f32);
  EXPECT_EQ(p->rounded_num_frames(1), 1);
  EXPECT_EQ(p->rounded_num_frames(5), 5);
  EXPECT_EQ(p->rounded_num_frames(7), 5);  // num_frames // 4 * 4 + 1, as Diffusers
  EXPECT_EQ(p->rounded_num_frames(8), 9);
  EXPECT_EQ(p->rounded_num_frames(81), 81);
  EXPECT_EQ(p->rounded_num_frames(84), 85);
  EXPECT_NE(error_of([&] { p->rounded_num_frames(0); }).find("num_frames must be at least 1, got 0"), std::string::npos);

  WanCallOptions o;
  o.prompt = {"a cat"};
  o.height = 40;
  o.width = 32;
  o.num_frames = 5;
  o.num_inference_steps = 1;
  const std::string e = error_of([&] { (*p)(o); });
  EXPECT_NE(e.find("multiples of 16"), std::string::npos) << e;
  EXPECT_NE(e.find("32x32 or 32x48"), std::string::npos) << e;

  o.height = 32;
  o.guidance_scale_2 = 2.0;
  EXPECT_NE(error_of([&] { (*p)(o); }).find("guidance_scale_2 is only supported"), std::string::npos);
  o.guidance_scale_2.reset();
  o.output_type = "pil";
  EXPECT_NE(error_of([&] { (*p)(o); }).find("output_type must be"), std::string::npos);
}

TEST(WanPipeline, RoundedFrameCountGivesTheSameVideo) {
  auto p = WanPipeline::from_pretrained(kFixtures / "tiny-wan", DType::f32);
  WanCallOptions o;
  o.prompt = {"a red fox"};
  o.height = 16;
  o.width = 16;
  o.num_inference_steps = 2;
  o.guidance_scale = 1.0;
  o.max_sequence_length = 16;
  o.num_frames = 5;
  const WanOutput a = (*p)(o);
  o.num_frames = 7;  // rounded down to 5, as Diffusers
  const WanOutput b = (*p)(o);
  EXPECT_EQ(b.num_frames, 5);
  EXPECT_EQ(b.frames_u8.shape(), (Shape{1, 5, 16, 16, 3}));
  EXPECT_EQ(rel_err(a.latents, b.latents), 0.0);
}

TEST(WanPipeline, Ti2vSizesOfSixteenAreFlooredLikeDiffusers) {
  // TI2V-5B-style: spatial factor 16 x patch 2 = 32. Diffusers floors 48 -> 32 with a warning (and refuses
  // sizes that are not multiples of 16).
  auto p = WanPipeline::from_pretrained(kFixtures / "tiny-wan-ti2v", DType::f32);
  WanCallOptions o;
  o.prompt = {"a red fox"};
  o.height = 48;
  o.width = 64;
  o.num_frames = 1;
  o.num_inference_steps = 1;
  o.max_sequence_length = 16;
  o.output_type = "latent";
  const WanOutput a = (*p)(o);
  EXPECT_EQ(a.height, 32);
  EXPECT_EQ(a.width, 64);
  o.height = 32;
  const WanOutput b = (*p)(o);
  EXPECT_EQ(rel_err(a.latents, b.latents), 0.0);
  o.height = 40;
  EXPECT_NE(error_of([&] { (*p)(o); }).find("multiples of 16"), std::string::npos);
  o.height = 16;
  EXPECT_NE(error_of([&] { (*p)(o); }).find("at least 32"), std::string::npos);
}

TEST(WanPipeline, CallbackInterruptsAndLatentOutputSkipsTheVae) {
  auto p = WanPipeline::from_pretrained(kFixtures / "tiny-wan", DType::f32);
  WanCallOptions o;
  o.prompt = {"a red fox"};
  o.height = 16;
  o.width = 16;
  o.num_frames = 1;
  o.num_inference_steps = 4;
  o.max_sequence_length = 16;
  o.output_type = "latent";
  std::vector<int64_t> seen;
  o.callback = [&](int64_t i, int64_t n, float) {
    seen.push_back(i);
    EXPECT_EQ(n, 4);
    return i < 1;
  };
  const WanOutput out = (*p)(o);
  EXPECT_EQ(out.steps_run, 2);
  EXPECT_TRUE(out.interrupted);
  EXPECT_EQ(seen, (std::vector<int64_t>{0, 1}));
  EXPECT_FALSE(out.frames_u8.defined());
  EXPECT_EQ(out.latents.shape(), (Shape{1, 16, 1, 2, 2}));
}

// A scratch pipeline folder: tiny-wan's model_index.json and components, with some replaced or left out.
std::filesystem::path scratch_wan(const std::string& name, const std::map<std::string, std::filesystem::path>& swap,
                                  const std::vector<std::string>& drop = {}) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("diffq-wan-" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path src = fs::absolute(kFixtures / "tiny-wan");
  std::ifstream in(src / "model_index.json");
  auto mi = nlohmann::json::parse(in);
  for (const auto& d : drop) mi.erase(d);
  std::ofstream(dir / "model_index.json") << mi.dump(2);
  for (const char* c : {"scheduler", "text_encoder", "tokenizer", "transformer", "vae"}) {
    if (std::find(drop.begin(), drop.end(), c) != drop.end()) continue;
    const auto it = swap.find(c);
    fs::create_directory_symlink(it != swap.end() ? fs::absolute(it->second) : fs::canonical(src / c), dir / c);
  }
  return dir;
}

TEST(WanPipeline, FoldersThatDoNotFitTogetherAreNamed) {
  // A transformer whose text_dim (16) is not the UMT5 encoder's d_model (8).
  auto dir = scratch_wan("text-dim", {{"transformer", kFixtures / "wan-transformer" / "t2v"}});
  std::string e = error_of([&] { WanPipeline::from_pretrained(dir, DType::f32); });
  EXPECT_NE(e.find("d_model 8 differs from the transformer's text_dim 16"), std::string::npos) << e;
  // A transformer whose in_channels (4) is not the VAE's z_dim (16).
  dir = scratch_wan("z-dim", {{"transformer", kFixtures / "wan-transformer" / "plain"}});
  e = error_of([&] { WanPipeline::from_pretrained(dir, DType::f32); });
  EXPECT_NE(e.find("in_channels 4 differs from the VAE's z_dim 16"), std::string::npos) << e;
  // No scheduler; no transformer at all.
  dir = scratch_wan("no-scheduler", {}, {"scheduler"});
  e = error_of([&] { WanPipeline::from_pretrained(dir, DType::f32); });
  EXPECT_NE(e.find("has no scheduler component"), std::string::npos) << e;
  dir = scratch_wan("no-transformer", {}, {"transformer"});
  e = error_of([&] { WanPipeline::from_pretrained(dir, DType::f32); });
  EXPECT_NE(e.find("neither transformer nor transformer_2"), std::string::npos) << e;
  // No VAE: latents only.
  dir = scratch_wan("no-vae", {}, {"vae"});
  auto p = WanPipeline::from_pretrained(dir, DType::f32);
  WanCallOptions o;
  o.prompt = {"a fox"};
  o.height = o.width = 16;
  o.num_frames = 1;
  o.num_inference_steps = 1;
  o.max_sequence_length = 8;
  e = error_of([&] { (*p)(o); });
  EXPECT_NE(e.find("needs a VAE"), std::string::npos) << e;
  o.output_type = "latent";
  EXPECT_EQ((*p)(o).latents.shape(), (Shape{1, 16, 1, 2, 2}));
  for (const char* n : {"text-dim", "z-dim", "no-scheduler", "no-transformer", "no-vae"})
    std::filesystem::remove_all(std::filesystem::temp_directory_path() / (std::string("diffq-wan-") + n));
}

TEST(DiffusionPipeline, FromPretrainedPicksThePipelineFromModelIndex) {
  EXPECT_EQ(DiffusionPipeline::pipeline_class_of(kFixtures / "tiny-wan"), "WanPipeline");
  EXPECT_EQ(DiffusionPipeline::pipeline_class_of(kFixtures / "tiny-flux"), "FluxPipeline");
  auto wan = DiffusionPipeline::from_pretrained(kFixtures / "tiny-wan", {.dtype = DType::f32});
  EXPECT_EQ(wan->class_name(), "WanPipeline");
  EXPECT_TRUE(wan->generates_video());
  const GenerateParams d = wan->defaults();
  EXPECT_EQ(d.height, 480);
  EXPECT_EQ(d.width, 832);
  EXPECT_EQ(d.num_frames, 81);
  EXPECT_EQ(d.num_inference_steps, 50);
  EXPECT_DOUBLE_EQ(*d.guidance_scale, 5.0);
  auto flux = DiffusionPipeline::from_pretrained(kFixtures / "tiny-flux", {.dtype = DType::f32});
  EXPECT_EQ(flux->class_name(), "FluxPipeline");
  EXPECT_FALSE(flux->generates_video());
  EXPECT_EQ(flux->defaults().num_inference_steps, 28);

  // The front door's Wan call equals the pipeline's own.
  GenerateParams g;
  g.prompt = "a red fox";
  g.height = g.width = 16;
  g.num_frames = 5;
  g.num_inference_steps = 2;
  g.max_sequence_length = 16;
  g.seed = 3;
  const GenerateResult r = wan->generate(g);
  auto direct = WanPipeline::from_pretrained(kFixtures / "tiny-wan", DType::f32);
  WanCallOptions o;
  o.prompt = {"a red fox"};
  o.height = o.width = 16;
  o.num_frames = 5;
  o.num_inference_steps = 2;
  o.max_sequence_length = 16;
  o.seed = 3;
  const WanOutput w = (*direct)(o);
  EXPECT_EQ(rel_err(r.latents, w.latents), 0.0);
  EXPECT_EQ(r.videos_u8.shape(), (Shape{1, 5, 16, 16, 3}));
  EXPECT_EQ(r.used.num_frames, 5);
  EXPECT_DOUBLE_EQ(*r.used.guidance_scale, 5.0);

  const auto tmp = std::filesystem::temp_directory_path() / "diffq-not-a-pipeline";
  std::filesystem::create_directories(tmp);
  EXPECT_NE(error_of([&] { DiffusionPipeline::from_pretrained(tmp); }).find("no model_index.json"), std::string::npos);
  std::filesystem::remove_all(tmp);
}

}  // namespace
}  // namespace diffq
