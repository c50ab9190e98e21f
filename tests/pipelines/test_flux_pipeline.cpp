// FluxPipeline on pre-computed prompt embeddings against Diffusers' FluxPipeline
// (tests/fixtures/tiny-flux*/reference/generate.safetensors: 32x32, 2 steps, seed 0).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "diffq/error.h"
#include "io/safetensors.h"
#include "pipelines/flux_pipeline.h"
#include "pipeline_test_util.h"

namespace {

using diffq::Tensor;
using diffq::testing::psnr_u8;
using diffq::testing::rel_err;

const std::string kFix = DIFFQ_SOURCE_DIR "/tests/fixtures/";

struct Case {
  const char* folder;
  double guidance;
};

void run_case(const Case& c) {
  SCOPED_TRACE(c.folder);
  auto pipe = diffq::FluxPipeline::from_pretrained(kFix + c.folder, diffq::DType::f32);
  ASSERT_TRUE(pipe->transformer && pipe->vae && pipe->scheduler && pipe->text_encoder && pipe->text_encoder_2);
  EXPECT_EQ(pipe->vae_scale_factor(), 2);
  auto ref = diffq::io::SafetensorsFile::open(kFix + c.folder + "/reference/generate.safetensors");

  diffq::FluxCallOptions o;
  o.prompt_embeds = ref.tensor("prompt_embeds");
  o.pooled_prompt_embeds = ref.tensor("pooled_prompt_embeds");
  o.height = o.width = 32;
  o.num_inference_steps = 2;
  o.guidance_scale = c.guidance;
  o.seed = 0;
  int observed = 0;
  o.step_observer = [&](const diffq::FluxStepTensors& s) {
    const std::string p = "step" + std::to_string(s.step) + ".";
    SCOPED_TRACE(p);
    const double e_in = rel_err(s.latents_in, ref.tensor(p + "latents_in"));
    const double e_t = rel_err(s.timestep, ref.tensor(p + "timestep"));
    const double e_v = rel_err(s.noise_pred, ref.tensor(p + "noise_pred"));
    const double e_out = rel_err(s.latents_out, ref.tensor(p + "latents_out"));
    std::printf("[%s %s] latents_in %.3g timestep %.3g noise_pred %.3g latents_out %.3g\n", c.folder, p.c_str(),
                e_in, e_t, e_v, e_out);
    EXPECT_LE(e_in, 1e-4);
    EXPECT_EQ(e_t, 0.0);
    EXPECT_LE(e_v, 1e-4);
    EXPECT_LE(e_out, 1e-4);
    ++observed;
  };
  std::vector<int64_t> seen;
  o.callback = [&](int64_t i, int64_t total, float) {
    EXPECT_EQ(total, 2);
    seen.push_back(i);
    return true;
  };
  auto out = (*pipe)(o);
  EXPECT_EQ(observed, 2);
  EXPECT_EQ(seen, (std::vector<int64_t>{0, 1}));
  EXPECT_FALSE(out.interrupted);
  const double e_final = rel_err(out.latents, ref.tensor("step1.latents_out"));
  const double e_img = rel_err(out.image_f32, ref.tensor("image_f32"));
  const double psnr = psnr_u8(out.image_u8, ref.tensor("image_u8"));
  std::printf("[%s] final latents %.3g image_f32 %.3g image_u8 PSNR %.2f dB\n", c.folder, e_final, e_img, psnr);
  EXPECT_LE(e_final, 1e-3);
  EXPECT_GE(psnr, 40.0);
  EXPECT_EQ(out.image_u8.dtype(), diffq::DType::u8);
  EXPECT_EQ(out.image_u8.shape(), (diffq::Shape{1, 32, 32, 3}));

  // output_type "latent" with injected latents (the reference noise) gives the same final latents.
  diffq::FluxCallOptions l = o;
  l.step_observer = nullptr;
  l.callback = nullptr;
  l.seed = 12345;
  l.latents = ref.tensor("step0.latents_in");
  l.output_type = "latent";
  auto lo = (*pipe)(l);
  EXPECT_FALSE(lo.image_u8.defined());
  EXPECT_LE(rel_err(lo.latents, ref.tensor("step1.latents_out")), 1e-3);
}

TEST(FluxPipeline, DevMatchesDiffusers) { run_case({"tiny-flux", 3.5}); }
TEST(FluxPipeline, SchnellMatchesDiffusers) { run_case({"tiny-flux-schnell", 0.0}); }

TEST(FluxPipeline, CallbackInterruptsAndInputsAreChecked) {
  auto pipe = diffq::FluxPipeline::from_pretrained(kFix + "tiny-flux", diffq::DType::f32, {.load_text_encoders = false});
  EXPECT_FALSE(pipe->text_encoder);
  auto ref = diffq::io::SafetensorsFile::open(kFix + "tiny-flux/reference/generate.safetensors");
  diffq::FluxCallOptions o;
  o.prompt_embeds = ref.tensor("prompt_embeds");
  o.pooled_prompt_embeds = ref.tensor("pooled_prompt_embeds");
  o.height = o.width = 32;
  o.num_inference_steps = 3;
  o.output_type = "latent";
  o.callback = [](int64_t i, int64_t, float) { return i < 0; };  // stop after the first step
  auto out = (*pipe)(o);
  EXPECT_TRUE(out.interrupted);
  EXPECT_EQ(out.steps_run, 1);

  // Not a multiple of vae_scale_factor * 2 (4): an error (Diffusers floors it with a warning).
  o.callback = nullptr;
  o.num_inference_steps = 1;
  o.height = 34;
  EXPECT_THROW((*pipe)(o), diffq::Error);
  o.height = 36;
  EXPECT_EQ(pipe->operator()(o).latents.shape(), (diffq::Shape{1, 72, 16}));

  auto bad = o;
  bad.height = 0;
  EXPECT_THROW((*pipe)(bad), diffq::Error);
  bad = o;
  bad.width = -16;
  EXPECT_THROW((*pipe)(bad), diffq::Error);
  bad = o;
  bad.output_type = "pil";
  EXPECT_THROW((*pipe)(bad), diffq::Error);
  bad = o;
  bad.pooled_prompt_embeds = Tensor();
  EXPECT_THROW((*pipe)(bad), diffq::Error);
  bad = o;
  bad.latents = Tensor::zeros({1, 10, 16}, diffq::DType::f32);
  EXPECT_THROW((*pipe)(bad), diffq::Error);

  // True CFG with the positive embeddings as the negative ones leaves the prediction unchanged.
  auto cfg = o;
  cfg.height = 32;
  cfg.negative_prompt_embeds = o.prompt_embeds;
  cfg.negative_pooled_prompt_embeds = o.pooled_prompt_embeds;
  cfg.true_cfg_scale = 4.0;
  int64_t calls = 0;
  cfg.step_observer = [&](const diffq::FluxStepTensors&) { ++calls; };
  auto a = (*pipe)(cfg);
  auto plain = o;
  plain.height = 32;
  auto b = (*pipe)(plain);
  EXPECT_EQ(calls, 1);
  EXPECT_LE(rel_err(a.latents, b.latents), 1e-6);
}

}  // namespace

namespace {

// The text encoders on the reference token ids give generate's embeddings (tokenizers come later).
TEST(FluxPipeline, EncodePromptIdsMatchesGenerateEmbeddings) {
  auto pipe = diffq::FluxPipeline::from_pretrained(kFix + "tiny-flux", diffq::DType::f32);
  auto te = diffq::io::SafetensorsFile::open(kFix + "tiny-flux/reference/text_encoders.safetensors");
  auto ref = diffq::io::SafetensorsFile::open(kFix + "tiny-flux/reference/generate.safetensors");
  auto e = pipe->encode_prompt_ids(te.tensor("clip_input_ids"), te.tensor("t5_input_ids"));
  const double ep = rel_err(e.prompt_embeds, ref.tensor("prompt_embeds"));
  const double eq = rel_err(e.pooled_prompt_embeds, ref.tensor("pooled_prompt_embeds"));
  std::printf("[encode_prompt_ids] prompt_embeds %.3g pooled %.3g\n", ep, eq);
  EXPECT_LE(ep, 1e-4);
  EXPECT_LE(eq, 1e-4);
  auto no_te = diffq::FluxPipeline::from_pretrained(kFix + "tiny-flux", diffq::DType::f32, {.load_text_encoders = false});
  EXPECT_THROW(no_te->encode_prompt_ids(te.tensor("clip_input_ids"), te.tensor("t5_input_ids")), diffq::Error);
}

TEST(FluxPipeline, EncodePromptFromTextMatchesDiffusers) {
  auto pipe = diffq::FluxPipeline::from_pretrained(kFix + "tiny-flux", diffq::DType::f32);
  auto ref = diffq::io::SafetensorsFile::open(kFix + "tiny-flux/reference/generate.safetensors");
  // The prompt of reference/params.json, tokenized by diffq, padded to 77 / 512 as Diffusers does.
  auto e = pipe->encode_prompt({"A photo of a Cat sitting on a RED chair, 4k!!"}, {}, 512);
  EXPECT_EQ(e.prompt_embeds.shape(), (diffq::Shape{1, 512, 8}));
  EXPECT_LE(rel_err(e.prompt_embeds, ref.tensor("prompt_embeds")), 1e-4);
  EXPECT_LE(rel_err(e.pooled_prompt_embeds, ref.tensor("pooled_prompt_embeds")), 1e-4);
  // prompt_2 goes to T5 only: the pooled (CLIP) output is unchanged, the T5 embeddings are not.
  auto e2 = pipe->encode_prompt({"A photo of a Cat sitting on a RED chair, 4k!!"}, {"a dog"}, 512);
  EXPECT_LE(rel_err(e2.pooled_prompt_embeds, ref.tensor("pooled_prompt_embeds")), 1e-6);
  EXPECT_GT(rel_err(e2.prompt_embeds, ref.tensor("prompt_embeds")), 1e-3);
  EXPECT_THROW(pipe->encode_prompt({"x"}, {}, 513), diffq::Error);
}

}  // namespace
