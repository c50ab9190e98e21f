// PEFT LoRAs on a bitsandbytes nf4 base through the public API (include/diffq/pipeline.h: PipelineOptions'
// quantization_config_json, load_lora, set_adapters) against Diffusers + PEFT + bitsandbytes on the CPU
// (tests/fixtures/lora-nf4, made by tools/reference/make_lora_nf4.py with the LoRA files of tests/fixtures/lora):
// one adapter, and two adapters with set_adapters weights. The quantized Linears keep their nf4 weights and run
// the LoRA unfused beside them, as PEFT's lora.bnb.Linear4bit does.
//
// Bound (max |d| / max |ref| of the final latents): the nf4 base alone keeps the nf4 pipeline test's 1e-6
// (tests/pipelines/test_flux_quantized.cpp: diffq's dequantized nf4 weights equal bitsandbytes' bit for bit,
// tests/quant, so only float32 accumulation order is left; measured 1.1e-7). With these LoRAs, which move the
// output by 1.8x, the LoRA itself carries more float32 rounding: measured 1.33e-6 (peft_a) and 2.67e-6 (two
// adapters), the same as the same LoRAs on the dense base in tests/lora/test_lora.cpp (1.77e-6 and 2.69e-6 against
// Diffusers + PEFT in float32), so the nf4 base adds nothing measurable. Bound 1e-5: ~4x the worst measured,
// 10x tighter than the dense LoRA tests' 1e-4; a LoRA weight off by 1e-4 (0.9999) gives 1.6e-4 and fails.
// The reference's bnb paths are those of a CPU without AVX-512 (see the script's docstring: bitsandbytes 0.50.2's
// AVX-512 CPU paths cannot run the tiny model's in_features); its nf4 base alone is 1.1e-7 from
// flux-quantized's nf4 latents (cases.json "nf4_none_vs_flux_quantized"), which this test checks too.
#include <gtest/gtest.h>

#include "common/latent_call.h"

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "diffq/pipeline.h"
#include "diffq/quantization.h"
#include "io/safetensors.h"
#include "pipelines/pipeline_test_util.h"

namespace {

using diffq::Tensor;
using diffq::testing::rel_err;

const std::string kFix = DIFFQ_SOURCE_DIR "/tests/fixtures/";
const std::string kDir = kFix + "lora-nf4/";
constexpr double kBase = 1e-6, kBound = 1e-5;  // see the header

const nlohmann::json& cases() {
  static const nlohmann::json j = [] {
    std::ifstream in(kDir + "cases.json");
    return nlohmann::json::parse(in);
  }();
  return j;
}
Tensor ref(const char* key) {
  static const auto f = diffq::io::SafetensorsFile::open(kDir + "latents.safetensors");
  return f.tensor(key);
}
std::string lora_file(const nlohmann::json& set, size_t i) {
  return DIFFQ_SOURCE_DIR "/" + cases().at("lora_dir").get<std::string>() + "/" +
         set.at("files").at(i).get<std::string>();
}

// The pipeline as a user loads it: the quantization config JSON Diffusers was given (= `--quant nf4`).
std::unique_ptr<diffq::DiffusionPipeline> nf4_pipeline() {
  diffq::PipelineOptions o;
  o.dtype = diffq::DType::f32;
  o.quantization_config_json = cases().at("quantization_config").dump();
  auto p = diffq::DiffusionPipeline::from_pretrained(kFix + "tiny-flux", o);
  const auto q = p->quantization();
  EXPECT_EQ(q.size(), 1u);
  EXPECT_NE(q.at("transformer").find("nf4"), std::string::npos) << q.at("transformer");
  return p;
}

Tensor run(diffq::DiffusionPipeline& p) {
  const auto& c = cases().at("call");
  return p.generate(diffq::testing::latent_call(c)).latents;
}

TEST(LoraNf4, ConfigIsTheNf4Shorthand) {  // what `diffq generate --quant nf4` passes (float32 compute)
  EXPECT_EQ(nlohmann::json::parse(diffq::quantization_config_from_shorthand("nf4", diffq::DType::f32, {"transformer"})),
            cases().at("quantization_config"));
}

TEST(LoraNf4, BaseMatchesDiffusersBitsandbytes) {
  // The reference's nf4 base is the flux-quantized one (the bnb paths it was made with are those of that fixture).
  EXPECT_LT(cases().at("nf4_none_vs_flux_quantized").get<double>(), kBase);
  auto p = nf4_pipeline();
  const double e = rel_err(run(*p), ref("nf4_none"));
  std::printf("[nf4] vs Diffusers + bitsandbytes: %.3g\n", e);
  EXPECT_LE(e, kBase);
}

TEST(LoraNf4, OneAdapterMatchesDiffusersPeft) {
  const auto& one = cases().at("one");
  auto p = nf4_pipeline();
  p->load_lora(lora_file(one, 0), one.at("names").at(0).get<std::string>());
  const Tensor got = run(*p);
  const double e = rel_err(got, ref("nf4_peft_a")), moved = rel_err(ref("nf4_peft_a"), ref("nf4_none"));
  std::printf("[nf4 + peft_a] vs Diffusers + PEFT + bitsandbytes: %.3g (the LoRA moves the output by %.3g)\n", e,
              moved);
  EXPECT_LE(e, kBound);
  EXPECT_GT(moved, 0.1);
  // unfused beside the nf4 Linears: fuse_lora returns the quantized layers it left (and fuses the text encoder)
  EXPECT_FALSE(p->fuse_lora().empty());
}

TEST(LoraNf4, TwoAdaptersWithWeightsMatchDiffusersPeft) {
  const auto& two = cases().at("two");
  auto p = nf4_pipeline();
  std::vector<std::string> names;
  for (size_t i = 0; i < two.at("files").size(); ++i)
    names.push_back(p->load_lora(lora_file(two, i), two.at("names").at(i).get<std::string>()));
  p->set_adapters(names, two.at("weights").get<std::vector<double>>());
  const double e = rel_err(run(*p), ref("nf4_two"));
  std::printf("[nf4 + a*0.7 + b*-0.4] vs Diffusers + PEFT + bitsandbytes: %.3g\n", e);
  EXPECT_LE(e, kBound);
}

TEST(LoraNf4, BoundSeesALoraWeightOffByOneInTenThousand) {
  // The same comparison must fail for a slightly wrong LoRA: peft_a at weight 0.9999 instead of 1 is 1.6e-4 off
  // the reference (measured; 0.99999: 1.6e-5, 0.9: 0.16), 16x the bound.
  const auto& one = cases().at("one");
  auto p = nf4_pipeline();
  p->load_lora(lora_file(one, 0), "a", 0.9999);
  const double e = rel_err(run(*p), ref("nf4_peft_a"));
  std::printf("[nf4 + peft_a at weight 0.9999] vs the weight-1 reference: %.3g\n", e);
  EXPECT_GT(e, 10 * kBound);
}

}  // namespace
