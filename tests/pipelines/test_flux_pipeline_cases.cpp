// Whole FluxPipeline calls from text against Diffusers (tests/fixtures/flux-pipeline-cases, made by
// tools/reference/make_flux_pipeline_cases.py): prompt batches, num_images_per_prompt, true CFG with
// negative prompts, prompt_2, non-square sizes, other seeds. Also the single-file transformer path and
// the call's input errors.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
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

nlohmann::json cases() {
  std::ifstream f(kFix + "flux-pipeline-cases/cases.json");
  return nlohmann::json::parse(f);
}

std::vector<std::string> strings(const nlohmann::json& c, const char* key) {
  return c.contains(key) ? c.at(key).get<std::vector<std::string>>() : std::vector<std::string>{};
}

diffq::FluxCallOptions options(const nlohmann::json& c) {
  diffq::FluxCallOptions o;
  o.prompt = strings(c, "prompt");
  o.prompt_2 = strings(c, "prompt_2");
  o.negative_prompt = strings(c, "negative_prompt");
  o.negative_prompt_2 = strings(c, "negative_prompt_2");
  if (c.contains("sigmas")) o.sigmas = c.at("sigmas").get<std::vector<double>>();
  o.true_cfg_scale = c.value("true_cfg_scale", 1.0);
  o.num_images_per_prompt = c.value("num_images_per_prompt", 1);
  o.height = c.at("height");
  o.width = c.at("width");
  o.num_inference_steps = c.at("num_inference_steps");
  o.guidance_scale = c.at("guidance_scale");
  o.seed = c.at("seed").get<uint64_t>();
  o.max_sequence_length = c.at("max_sequence_length");
  return o;
}

diffq::FluxOutput run_case(const std::string& name) {
  SCOPED_TRACE(name);
  const auto c = cases().at(name);
  auto pipe = diffq::FluxPipeline::from_pretrained(kFix + c.at("folder").get<std::string>(), diffq::DType::f32);
  const auto ref = diffq::io::SafetensorsFile::open(kFix + "flux-pipeline-cases/cases.safetensors");
  const auto out = (*pipe)(options(c));
  const Tensor ref_img = ref.tensor(name + ".image_u8");
  const double e = rel_err(out.latents, ref.tensor(name + ".latents"));
  const double psnr = psnr_u8(out.image_u8, ref_img);
  std::printf("[%s] final latents rel %.3g, image PSNR %.2f dB, %lld images\n", name.c_str(), e, psnr,
              (long long)out.image_u8.shape()[0]);
  EXPECT_LE(e, 1e-3);
  EXPECT_GE(psnr, 40.0);
  EXPECT_EQ(out.image_u8.shape(), ref_img.shape());
  return out;
}

TEST(FluxPipelineCases, DevBatchOfPromptsWithNegativesAndTrueCfg) { run_case("dev_batch_cfg"); }
TEST(FluxPipelineCases, SchnellWithPrompt2) { run_case("schnell_prompt2"); }
TEST(FluxPipelineCases, DevTallImageLargeSeed) { run_case("dev_tall"); }

// Custom sigmas set the step count (the case's num_inference_steps, 2, is ignored as in Diffusers) and
// are shifted by mu; negative_prompt_2 feeds T5's negative branch.
TEST(FluxPipelineCases, DevCustomSigmasAndNegativePrompt2) {
  const auto out = run_case("dev_custom_sigmas");
  EXPECT_EQ(out.steps_run, int64_t(cases().at("dev_custom_sigmas").at("sigmas").size()));
}

TEST(FluxPipelineCases, SingleFileTransformerEqualsFolder) {
  const auto c = cases().at("dev_tall");
  diffq::FluxPipelineLoadOptions lo;
  lo.transformer_file = kFix + "tiny-flux-single-file/flux1-tiny-dev.safetensors";
  auto single = diffq::FluxPipeline::from_pretrained(kFix + "tiny-flux", diffq::DType::f32, lo);
  auto folder = diffq::FluxPipeline::from_pretrained(kFix + "tiny-flux", diffq::DType::f32);
  auto o = options(c);
  o.output_type = "latent";
  EXPECT_EQ(rel_err((*single)(o).latents, (*folder)(o).latents), 0.0);

  lo.transformer_file = kFix + "tiny-flux/model_index.json";
  try {
    diffq::FluxPipeline::from_pretrained(kFix + "tiny-flux", diffq::DType::f32, lo);
    FAIL() << "expected an error";
  } catch (const diffq::Error& e) {
    EXPECT_NE(std::string(e.what()).find("model_index.json"), std::string::npos) << e.what();
  }
}

TEST(FluxPipelineCases, BadCallsAreClearErrors) {
  auto pipe = diffq::FluxPipeline::from_pretrained(kFix + "tiny-flux", diffq::DType::f32);
  auto expect_error = [&](const diffq::FluxCallOptions& o, const std::string& needle) {
    try {
      (*pipe)(o);
      ADD_FAILURE() << "expected an error mentioning " << needle;
    } catch (const diffq::Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  diffq::FluxCallOptions ok;
  ok.prompt = {"a fox"};
  ok.height = ok.width = 32;
  ok.num_inference_steps = 1;
  ok.max_sequence_length = 8;
  ok.output_type = "latent";
  EXPECT_NO_THROW((*pipe)(ok));

  auto o = ok;
  o.width = 30;  // tiny VAE: multiples of 4
  expect_error(o, "multiples of 4");
  o = ok;
  o.sigmas = std::vector<double>{};
  expect_error(o, "sigmas must not be empty");
  o.sigmas = std::vector<double>{1.0, std::numeric_limits<double>::quiet_NaN()};
  expect_error(o, "sigmas[1]");
  o = ok;
  o.max_sequence_length = 513;
  expect_error(o, "513");
  o = ok;
  o.num_images_per_prompt = 0;
  expect_error(o, "num_images_per_prompt");
  o = ok;
  o.prompt = {};
  expect_error(o, "prompt");
  o = ok;
  o.prompt = {"a", "b", "c"};
  o.negative_prompt = {"x", "y"};
  o.true_cfg_scale = 2.0;
  expect_error(o, "negative_prompt has 2 entries");
  o = ok;
  o.prompt_embeds = Tensor::zeros({1, 4, 8}, diffq::DType::f32);
  o.pooled_prompt_embeds = Tensor::zeros({1, 8}, diffq::DType::f32);
  expect_error(o, "not both");

  // A shared negative prompt serves every prompt row; num_images_per_prompt multiplies the batch.
  o = ok;
  o.prompt = {"a", "b"};
  o.negative_prompt = {"x"};
  o.true_cfg_scale = 2.0;
  o.num_images_per_prompt = 3;
  EXPECT_EQ((*pipe)(o).latents.shape()[0], 6);
}

}  // namespace
