// The tiny FLUX pipeline with a nunchaku_lite transformer (tests/fixtures/quant-nunchaku/pipeline, by
// tools/reference/make_quant_nunchaku.py): diffq's latents against the torch reference of the nunchaku
// kernels' math run in float32 on the CPU (Diffusers needs CUDA and the Hub kernels for this format:
// cases.json "diffusers_on_cpu").
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "common/max_rel.h"
#include "io/safetensors.h"
#include "modules/quantize_on_load.h"
#include "pipelines/flux_pipeline.h"
#include "common/flux_latent_call.h"

namespace {

const std::string kFix = DIFFQ_SOURCE_DIR "/tests/fixtures/quant-nunchaku/";

TEST(NunchakuPipeline, FluxLatentsMatchTorchReference) {
  std::ifstream f(kFix + "cases.json");
  const auto cases = nlohmann::json::parse(f);
  const auto call = cases.at("call");
  auto pipe = diffq::FluxPipeline::from_pretrained(kFix + "pipeline", diffq::DType::f32, {});
  ASSERT_EQ(pipe->quantization.count("transformer"), 1u);
  std::printf("transformer: %s\n", pipe->quantization.at("transformer").c_str());
  const auto summary = diffq::summarize_quantization(*pipe->transformer);
  EXPECT_EQ(summary.quantized, int64_t(cases.at("svdq_targets").size() + cases.at("awq_targets").size()));
  auto o = diffq::testing::flux_latent_call(call);
  const diffq::Tensor lat = (*pipe)(o).latents;
  const auto ref = diffq::io::SafetensorsFile::open(kFix + "latents.safetensors").tensors();
  const double e = diffq::testing::max_rel(lat, ref.at("nunchaku"));
  const double e_none = diffq::testing::max_rel(lat, ref.at("none"));
  std::printf("[nunchaku] vs torch reference %.3g (vs the unquantized transformer %.3g)\n", e, e_none);
  EXPECT_LE(e, 1e-4);
  EXPECT_GT(e_none, 10 * e);  // the comparison sees the quantization
}

}  // namespace
