// WanPipeline calls that Diffusers refuses, refused by diffq too, and their neighbours that run identically
// (tests/fixtures/wan-refusals/, made by tools/reference/make_wan_refusals.py; found by
// tools/reference/crosscheck_wan.py --random-models): expand_timesteps with a patch (1, 1, 1) transformer.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "diffq/error.h"
#include "pipelines/wan_pipeline.h"

namespace diffq {
namespace {

const std::filesystem::path kDir = "tests/fixtures/wan-refusals";

TEST(WanRefusals, ExpandTimestepsWithPatchOtherThan122) {
  std::ifstream in(kDir / "cases.json");
  ASSERT_TRUE(in.good());
  const auto cases = nlohmann::json::parse(in);
  int refused = 0, ran = 0;
  for (const auto& c : cases) {
    SCOPED_TRACE(c.dump().substr(0, 200));
    auto pipe = WanPipeline::from_pretrained(kDir / c["folder"].get<std::string>(), DType::f32);
    WanCallOptions o;
    o.prompt = {c["prompt"].get<std::string>()};
    o.height = c["height"];
    o.width = c["width"];
    o.num_frames = c["num_frames"];
    o.num_inference_steps = c["num_inference_steps"];
    o.guidance_scale = c["guidance_scale"];
    o.seed = c["seed"];
    o.output_type = "latent";
    if (c.contains("diffusers_error")) {
      try {
        (*pipe)(o);
        ADD_FAILURE() << "ran; Diffusers: " << c["diffusers_error"];
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("expand_timesteps"), std::string::npos) << e.what();
        ++refused;
      }
      continue;
    }
    const WanOutput out = (*pipe)(o);
    const auto want = c["latents"].get<std::vector<float>>();
    const auto got = out.latents.to_f32_vector();
    ASSERT_EQ(got.size(), want.size());
    double md = 0, mr = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      md = std::max(md, double(std::fabs(got[i] - want[i])));
      mr = std::max(mr, double(std::fabs(want[i])));
    }
    EXPECT_LE(md / mr, 1e-4);
    ++ran;
  }
  EXPECT_EQ(refused, 1);
  EXPECT_EQ(ran, 1);
}

}  // namespace
}  // namespace diffq
