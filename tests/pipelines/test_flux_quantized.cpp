// The tiny FLUX pipeline with pipeline-level quantization of the transformer, every backend, against
// Diffusers running the same quantization on the CPU (tests/fixtures/flux-quantized, made by
// tools/reference/make_flux_quantized.py). Each scheme's dequantized weights equal the library's bit
// for bit (tests/quant), so the final latents agree to float32 accumulation error, except where the
// library's CPU forward quantizes activations differently (documented per scheme below). GGUF types,
// which Diffusers cannot quantize to, are compared with Diffusers running the weights that ggml's quantizer
// and gguf-py's dequantizer make (latents_gguf.safetensors); int4wo, which needs CUDA kernels, with the
// unquantized pipeline: the bound is the quantization error itself.
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
#include "common/flux_latent_call.h"

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
  auto o = diffq::testing::flux_latent_call(call);
  return {(*pipe)(o).latents, pipe->quantization, diffq::summarize_quantization(*pipe->transformer)};
}

const diffq::io::SafetensorsFile& reference() {
  static const auto f = diffq::io::SafetensorsFile::open(kFix + "flux-quantized/latents.safetensors");
  return f;
}
const diffq::io::SafetensorsFile& reference_gguf() {
  static const auto f = diffq::io::SafetensorsFile::open(kFix + "flux-quantized/latents_gguf.safetensors");
  return f;
}
const nlohmann::json& cases() {
  static const nlohmann::json j = [] {
    std::ifstream in(kFix + "flux-quantized/cases.json");
    return nlohmann::json::parse(in);
  }();
  return j;
}

struct Case {
  const char* scheme;
  const char* reference;  // the fixture key: the same scheme in Diffusers, "gguf" (latents_gguf), or "none"
  double bound;           // max relative error of the final latents
};

class FluxQuantized : public ::testing::TestWithParam<Case> {};

TEST_P(FluxQuantized, FinalLatentsCloseToTheReferenceLibrary) {
  const Case c = GetParam();
  const GenRun r = generate(c.scheme);
  ASSERT_EQ(r.quantization.count("transformer"), 1u) << c.scheme;
  EXPECT_EQ(r.quantization.count("text_encoder_2"), 0u);
  EXPECT_GT(r.summary.quantized, 0) << c.scheme;
  const bool gguf = std::string(c.reference) == "gguf";
  const double e = rel_err(r.latents, gguf ? reference_gguf().tensor(c.scheme) : reference().tensor(c.reference));
  if (gguf)  // the same layers quantized as in the reference (in_features a whole number of blocks)
    EXPECT_EQ(size_t(r.summary.quantized), cases().at("gguf").at(c.scheme).at("linear_layers").size()) << c.scheme;
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
        // GGUF: Diffusers with ggml-quantized, gguf-py-dequantized weights (make_flux_quantized.py). Measured
        // (2026-12-01; reference made on an AVX-512 machine): 2.6e-7 / 2.5e-7 / 2.4e-7 / 2.2e-7; bound 1e-6 as
        // above. Against the unquantized pipeline (the only comparison before) they are 1.59e-3 / 3.16e-2 /
        // 1.96e-3 / 2.93e-4 (q4_K, q6_K: 2 weights, the only ones whose in_features, 256, holds whole
        // super-blocks), which could not see one sub-block scale of each q4_K row off by one step (1.96e-3 ->
        // 1.99e-3); here that gives 6.1e-5 and fails.
        Case{"q8_0", "gguf", 1e-6}, Case{"q4_0", "gguf", 1e-6}, Case{"q4_K", "gguf", 1e-6}, Case{"q6_K", "gguf", 1e-6},
        // int4wo: no CPU reference pipeline (torchao's int4 needs mslk's CUDA kernels; see docs/quantization.md),
        // so compared with the unquantized pipeline: the figure is the scheme's own quantization error on this tiny
        // model, deterministic (diffq equals the torchao port bit for bit, tests/quant). Bound 2x the measured
        // 2.72e-3: a defect that makes the quantization clearly lossier fails (so does, for q8_0 in the same kind
        // of check, codes truncated instead of rounded: 3.6e-3 vs 1.59e-3); a subtler one cannot be seen this way.
        Case{"int4wo", "none", 5.5e-3}),
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
