// The tiny FLUX pipeline with pipeline-level quantization of the transformer, every backend, against
// Diffusers running the same quantization on the CPU (tests/fixtures/flux-quantized, made by
// tools/reference/make_flux_quantized.py). Each scheme's dequantized weights equal the library's bit
// for bit (tests/quant), so the final latents agree to float32 accumulation error, except where the
// library's CPU forward quantizes activations differently (documented per scheme below). GGUF types
// and schemes Diffusers cannot run here are compared with the unquantized pipeline: the bound is the
// quantization error itself.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "diffq/error.h"
#include "io/safetensors.h"
#include "modules/quantize_on_load.h"
#include "pipelines/flux_pipeline.h"
#include "pipeline_test_util.h"
#include "quant/quant_method.h"

namespace {

using diffq::Tensor;
using diffq::testing::psnr_u8;
using diffq::testing::rel_err;

const std::string kFix = DIFFQ_SOURCE_DIR "/tests/fixtures/";

struct GenRun {
  Tensor latents;
  std::map<std::string, std::string> quantization;
  diffq::QuantizationSummary summary;
};

GenRun generate(const std::string& scheme) {
  std::ifstream f(kFix + "flux-quantized/cases.json");
  const auto call = nlohmann::json::parse(f).at("call");
  diffq::FluxPipelineLoadOptions lo;
  if (!scheme.empty()) {
    const auto [backend, kwargs] = diffq::quant::quant_shorthand(scheme, "float32");
    lo.quantization_config = diffq::PipelineQuantizationConfig(backend, kwargs, {"transformer"}, std::nullopt);
  }
  auto pipe = diffq::FluxPipeline::from_pretrained(kFix + "tiny-flux", diffq::DType::f32, lo);
  diffq::FluxCallOptions o;
  o.prompt = {call.at("prompt").get<std::string>()};
  o.height = call.at("height");
  o.width = call.at("width");
  o.num_inference_steps = call.at("num_inference_steps");
  o.guidance_scale = call.at("guidance_scale");
  o.seed = call.at("seed");
  o.max_sequence_length = call.at("max_sequence_length");
  o.output_type = "latent";
  return {(*pipe)(o).latents, pipe->quantization, diffq::summarize_quantization(*pipe->transformer)};
}

const diffq::io::SafetensorsFile& reference() {
  static const auto f = diffq::io::SafetensorsFile::open(kFix + "flux-quantized/latents.safetensors");
  return f;
}

struct Case {
  const char* scheme;
  const char* reference;  // the fixture key: the same scheme in Diffusers, or "none"
  double bound;           // max relative error of the final latents
};

class FluxQuantized : public ::testing::TestWithParam<Case> {};

TEST_P(FluxQuantized, FinalLatentsCloseToTheReferenceLibrary) {
  const Case c = GetParam();
  const GenRun r = generate(c.scheme);
  ASSERT_EQ(r.quantization.count("transformer"), 1u) << c.scheme;
  EXPECT_EQ(r.quantization.count("text_encoder_2"), 0u);
  EXPECT_GT(r.summary.quantized, 0) << c.scheme;
  const double e = rel_err(r.latents, reference().tensor(c.reference));
  const double e_none = rel_err(r.latents, reference().tensor("none"));
  std::printf("[%s] vs %s: %.3g (vs unquantized %.3g), %lld weights quantized (%s)\n", c.scheme, c.reference, e,
              e_none, (long long)r.summary.quantized, r.quantization.at("transformer").c_str());
  EXPECT_LE(e, c.bound) << c.scheme;
  EXPECT_GT(e_none, 0.0) << c.scheme << ": quantization changed nothing";
}

INSTANTIATE_TEST_SUITE_P(
    Schemes, FluxQuantized,
    ::testing::Values(
        // Same scheme in Diffusers + the library on the CPU: diffq's dequantized weights are the library's bit
        // for bit, so only float32 accumulation order remains. Measured (2026-12-01, this fixture): 1.1e-7
        // (nf4, fp4, int8wo, fp8wo, quanto int4/int2/fp8), 8.3e-8 (quanto int8), 0 (bnb int8). Bound 1e-6:
        // a few float32 ulps of the latents. It fails when one output row of every int8wo weight is
        // dequantized with its scale off by 1e-4 (relative): 3.4e-5, which the former 1e-4 let through.
        Case{"nf4", "nf4", 1e-6}, Case{"fp4", "fp4", 1e-6}, Case{"int8", "int8", 1e-6}, Case{"int8wo", "int8wo", 1e-6},
        // int8dq: 2.7e-3 (Zen 3) / 3.2e-3 (AVX-512 Xeon) from Diffusers+torchao in the pipeline although a single
        // linear matches torchao bit for bit (tests/quant): Diffusers moves by up to ~6e-3 against itself when the
        // noise is nudged by 1 ulp (activation codes flip; tools/reference/crosscheck_flux.py), see
        // docs/quantization.md.
        Case{"int8dq", "int8dq", 5e-3}, Case{"fp8wo", "fp8wo", 1e-6}, Case{"quanto-int8", "quanto-int8", 1e-6},
        Case{"quanto-int4", "quanto-int4", 1e-6}, Case{"quanto-int2", "quanto-int2", 1e-6},
        Case{"quanto-fp8", "quanto-fp8", 1e-6},
        // No CPU reference pipeline (Diffusers never quantizes to GGUF; int4wo needs CUDA kernels): compared with
        // the unquantized pipeline, so the figure is the scheme's own quantization error on this tiny model. It is
        // deterministic (diffq's quantizers equal ggml's / the torchao port bit for bit, tests/quant), so the bound
        // is 2x the measured value (2026-12-01): a defect that makes the quantization clearly lossier fails, e.g.
        // q8_0 codes truncated instead of rounded give 3.6e-3 (the former bound 0.02 passed it). A defect that
        // does not change the error's size (one sub-block scale of each q4_K row off by one step: 1.96e-3 ->
        // 1.99e-3) cannot be seen this way; tests/quant checks those bits.
        Case{"q8_0", "none", 3.2e-3},   // measured 1.59e-3
        Case{"q4_0", "none", 6.4e-2},   // measured 3.16e-2
        Case{"q4_K", "none", 4.0e-3},   // measured 1.96e-3 (2 weights: only in_features 256 holds whole blocks)
        Case{"q6_K", "none", 6.0e-4},   // measured 2.93e-4 (the same 2 weights)
        Case{"int4wo", "none", 5.5e-3}  // measured 2.72e-3
        ),
    [](const auto& info) {
      std::string n = info.param.scheme;
      for (char& ch : n)
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
      return n;
    });

TEST(FluxQuantizedErrors, BadSchemesAndConfigsAreClear) {
  EXPECT_THROW(diffq::quant::quant_shorthand("int3", "float32"), diffq::Error);
  EXPECT_THROW(diffq::quant::make_quant_method("bitsandbytes_4bit", {{"load_in_8bit", true}}), diffq::Error);
  EXPECT_THROW(diffq::quant::make_quant_method("torchao", {{"quant_type", "NoSuchConfig"}}), diffq::Error);
  EXPECT_THROW(diffq::quant::make_quant_method("gguf", {{"type", "q9_K"}}), diffq::Error);
}

}  // namespace
