// The tiny FLUX pipeline (float32) with SDNQ against Diffusers + sdnq on the CPU (the same files / the same
// PipelineQuantizationConfig): quantize-on-load of the transformer for every case of the fixture, and the
// save_pretrained folder loaded pre-quantized. The dequantized weights are the library's bit for bit
// (test_sdnq.cpp), so only float32 accumulation order remains.
#include <gtest/gtest.h>

#include "io/safetensors.h"
#include "modules/quantize_on_load.h"
#include "pipelines/pipeline_test_util.h"
#include "quant/sdnq_autoround_fixture.h"

namespace {

using namespace diffq;
using diffq::testing::rel_err;

const io::SafetensorsFile& reference() {
  static const auto f = io::SafetensorsFile::open(diffq::testing::sdnq_ar_root() / "latents.safetensors");
  return f;
}

struct GenRun {
  Tensor latents;
  std::string quantization;
  int64_t quantized = 0;
};

GenRun generate(const std::filesystem::path& folder, const std::optional<PipelineQuantizationConfig>& q) {
  FluxPipelineLoadOptions lo;
  lo.quantization_config = q;
  auto pipe = FluxPipeline::from_pretrained(folder, DType::f32, lo);
  GenRun r;
  r.latents = (*pipe)(diffq::testing::sdnq_ar_call()).latents;
  r.quantization = pipe->quantization.count("transformer") ? pipe->quantization.at("transformer") : "";
  r.quantized = summarize_quantization(*pipe->transformer).quantized;
  return r;
}

// Measured (2026-12-02): see docs/quantization.md; bound 1e-6 = a few float32 ulps of the latents, as for the
// other backends whose dequantization is bit-exact (tests/pipelines/test_flux_quantized.cpp).
constexpr double kBound = 1e-6;

TEST(SdnqPipeline, QuantizeOnLoadMatchesDiffusers) {
  for (const auto& [name, c] : diffq::testing::sdnq_ar_cases().at("sdnq").items()) {
    SCOPED_TRACE(name);
    const PipelineQuantizationConfig q("sdnq", c.at("quant_kwargs"), {"transformer"}, std::nullopt);
    const GenRun r = generate(diffq::testing::tiny_flux_root(), q);
    EXPECT_EQ(size_t(r.quantized), c.at("modules").size());
    const double e = rel_err(r.latents, reference().tensor("sdnq_" + name));
    const double e_none = rel_err(r.latents, reference().tensor("none"));
    std::printf("[sdnq %s] vs Diffusers: %.3g (vs unquantized %.3g), %lld weights (%s)\n", name.c_str(), e, e_none,
                (long long)r.quantized, r.quantization.c_str());
    EXPECT_LE(e, kBound);
    EXPECT_GT(e_none, 0.0);
  }
}

TEST(SdnqPipeline, PrequantizedFolderMatchesDiffusers) {
  const auto& pq = diffq::testing::sdnq_ar_cases().at("prequant_sdnq");
  const GenRun r = generate(diffq::testing::sdnq_ar_root() / pq.at("folder").get<std::string>(), std::nullopt);
  EXPECT_EQ(size_t(r.quantized), pq.at("modules").size());
  EXPECT_NE(r.quantization.find("pre-quantized"), std::string::npos) << r.quantization;
  const double e = rel_err(r.latents, reference().tensor("prequant_sdnq"));
  std::printf("[sdnq pre-quantized] vs Diffusers: %.3g, %lld weights (%s)\n", e, (long long)r.quantized,
              r.quantization.c_str());
  EXPECT_LE(e, kBound);
}

TEST(AutoRoundPipeline, PrequantizedFolderMatchesDiffusers) {
  const auto& ar = diffq::testing::sdnq_ar_cases().at("autoround");
  const GenRun r = generate(diffq::testing::sdnq_ar_root() / ar.at("folder").get<std::string>(), std::nullopt);
  EXPECT_EQ(size_t(r.quantized), ar.at("modules").size());
  const double e = rel_err(r.latents, reference().tensor("prequant_autoround"));
  const double e_none = rel_err(r.latents, reference().tensor("none"));
  std::printf("[autoround pre-quantized] vs Diffusers: %.3g (vs unquantized %.3g), %lld weights (%s)\n", e, e_none,
              (long long)r.quantized, r.quantization.c_str());
  EXPECT_LE(e, kBound);
  EXPECT_GT(e_none, 0.0);
}

}  // namespace
