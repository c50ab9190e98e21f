// ModelOpt exports (tests/fixtures/quant-bfl-modelopt/modelopt-mixed: tiny-flux's transformer quantized by
// nvidia-modelopt on the CPU with FP8, FP8_PER_CHANNEL_PER_TOKEN, W8A8_SQ_PER_CHANNEL, W4A16_AWQ and NVFP4 per
// block, exported with export_hf_checkpoint: quant_algo MIXED_PRECISION) against the torch reference of each
// format's math on the CPU (Diffusers cannot load ModelOpt exports): dequantization bit for bit per algorithm,
// the pipeline's final latents (weight-only, x * pre_quant_scale where present), and the config errors.
#include <gtest/gtest.h>

#include <cstdio>

#include "bfl_modelopt_test_util.h"
#include "io/safetensors.h"
#include "modules/quantize_on_load.h"
#include "pipelines/pipeline_test_util.h"
#include "quant/bfl/scaled_weight.h"
#include "quant/modelopt/modelopt_config.h"
#include "quant/quant_method.h"

namespace {

using namespace diffq;
using namespace diffq::testing::bflmo;

std::unique_ptr<FluxPipeline>& pipeline() {
  static std::unique_ptr<FluxPipeline> p = FluxPipeline::from_pretrained(kFix / "modelopt-mixed", DType::f32);
  return p;
}

TEST(ModelOptFolder, DequantizedWeightsEqualTheFormatReferenceBitForBit) {
  auto& pipe = pipeline();
  ASSERT_EQ(pipe->quantization.count("transformer"), 1u);
  EXPECT_NE(pipe->quantization.at("transformer").find("modelopt MIXED_PRECISION"), std::string::npos);
  const auto ref = io::SafetensorsFile::open(kFix / "modelopt_reference.safetensors");
  const std::map<std::string, std::string> scheme = {
      {"FP8", "modelopt_fp8"}, {"FP8_PER_CHANNEL_PER_TOKEN", "modelopt_fp8_pc"}, {"W8A8_SQ_PER_CHANNEL", "modelopt_int8"},
      {"W4A16_AWQ", "modelopt_int4_awq"}, {"NVFP4", "modelopt_nvfp4"}};
  const auto& deq = cases().at("modelopt").at("deq_layers");
  ASSERT_EQ(deq.size(), 5u);
  for (const auto& [algo, name] : deq.items()) {
    const Parameter& p = param(*pipe->transformer, name.get<std::string>() + ".weight");
    ASSERT_TRUE(p.is_quantized()) << name;
    EXPECT_EQ(p.quantized().scheme(), scheme.at(algo)) << name;
    EXPECT_EQ(bit_mismatches(p.quantized().dequantize(DType::f32), ref.tensor("deq." + name.get<std::string>())), 0)
        << algo << " " << name;
  }
  // Every layer the config names is quantized with its algorithm; the pre_quant_scales are attached.
  int64_t n = 0;
  for (const auto& [algo, layers] : cases().at("modelopt").at("layers_per_algo").items())
    for (const auto& l : layers) {
      const Parameter& p = param(*pipe->transformer, l.get<std::string>() + ".weight");
      ASSERT_TRUE(p.is_quantized()) << l;
      EXPECT_EQ(p.quantized().scheme(), scheme.at(algo)) << l;
      ++n;
    }
  EXPECT_EQ(summarize_quantization(*pipe->transformer).quantized, n);
  for (const auto& k : cases().at("modelopt").at("pre_quant_scale")) {
    const std::string key = k.get<std::string>();
    const auto& w = dynamic_cast<const quant::ScaledWeight&>(
        param(*pipe->transformer, key.substr(0, key.size() - std::string("pre_quant_scale").size()) + "weight").quantized());
    EXPECT_TRUE(w.pre_quant_scale().defined()) << key;
  }
}

TEST(ModelOptFolder, PipelineMatchesTheTorchReferenceFp32) {
  const Tensor lat = (*pipeline())(call_options()).latents;
  const auto ref = io::SafetensorsFile::open(kFix / "modelopt_reference.safetensors");
  const double e = diffq::testing::rel_err(lat, ref.tensor("latents"));
  std::printf("[modelopt mixed] final latents vs torch reference: %.3g\n", e);
  EXPECT_LE(e, 1e-4);
}

TEST(ModelOptFolder, ConfigErrorsNameTheField) {
  using nlohmann::json;
  std::string e = error_of([] { quant::quant_method_from_config({{"quant_method", "modelopt"}, {"quant_algo", "MXFP8"}}, "cfg.json"); });
  EXPECT_NE(e.find("MXFP8"), std::string::npos) << e;
  e = error_of([] { quant::quant_method_from_config({{"quant_method", "modelopt"}, {"quant_type", "FP8"}}, "cfg.json"); });
  EXPECT_NE(e.find("quant_type"), std::string::npos) << e;
  e = error_of([] {
    quant::quant_method_from_config(
        {{"quant_method", "modelopt"}, {"quant_algo", "MIXED_PRECISION"}, {"quantized_layers", {{"a.b", {{"quant_algo", "W4A8_AWQ"}}}}}},
        "cfg.json");
  });
  EXPECT_NE(e.find("quantized_layers.a.b"), std::string::npos) << e;
  const auto m = quant::quant_method_from_config({{"quant_method", "modelopt"}, {"quant_algo", "FP8"}}, "cfg.json");
  EXPECT_EQ(m->backend(), "modelopt");
  EXPECT_EQ(m->scheme(), "FP8");
  EXPECT_THROW(m->quantize(Tensor::zeros({2, 2}, DType::f32)), Error);
}

TEST(ModelOptFolder, MissingScaleIsAnErrorNamingTheKey) {
  const auto m = quant::quant_method_from_config({{"quant_method", "modelopt"}, {"quant_algo", "NVFP4"}}, "cfg.json");
  io::StateDict sd;
  sd["l.weight"] = Tensor::zeros({4, 8}, DType::u8);
  sd["l.weight_scale"] = Tensor::zeros({4, 1}, DType::f8_e4m3fn);
  std::vector<std::string> consumed;
  std::string e = error_of([&] { m->load(sd, "l", {4, 16}, nullptr, consumed); });
  EXPECT_NE(e.find("l.weight_scale_2"), std::string::npos) << e;
  sd.erase("l.weight_scale");
  e = error_of([&] { m->load(sd, "l", {4, 16}, nullptr, consumed); });
  EXPECT_NE(e.find("l.weight_scale is missing"), std::string::npos) << e;
}

}  // namespace
