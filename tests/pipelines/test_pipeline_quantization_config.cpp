// PipelineQuantizationConfig: Diffusers' validation errors and component resolution (pipe_quant_config.py).
#include <gtest/gtest.h>

#include <string>

#include "diffq/error.h"
#include "pipelines/pipeline_quantization_config.h"

namespace {

using diffq::PipelineQuantizationConfig;
using nlohmann::json;

std::string error_of(const json& j) {
  try {
    PipelineQuantizationConfig::from_json(j);
  } catch (const diffq::Error& e) {
    return e.what();
  }
  return "";
}

TEST(PipelineQuantizationConfig, GlobalModeResolvesListedComponents) {
  auto q = PipelineQuantizationConfig::from_json(
      {{"quant_backend", "bitsandbytes_4bit"},
       {"quant_kwargs", {{"load_in_4bit", true}, {"bnb_4bit_quant_type", "nf4"}}},
       {"components_to_quantize", {"transformer", "text_encoder_2"}}});
  EXPECT_FALSE(q.is_granular());
  ASSERT_TRUE(q.resolve("transformer"));
  EXPECT_EQ(q.resolve("transformer")->backend, "bitsandbytes_4bit");
  EXPECT_EQ(q.resolve("text_encoder_2")->kwargs.at("bnb_4bit_quant_type"), "nf4");
  EXPECT_FALSE(q.resolve("vae"));
  EXPECT_FALSE(q.resolve("text_encoder"));
  // A single string is a one-element list.
  auto s = PipelineQuantizationConfig::from_json(
      {{"quant_backend", "torchao"}, {"quant_kwargs", {{"quant_type", "int8wo"}}}, {"components_to_quantize", "transformer"}});
  EXPECT_TRUE(s.resolve("transformer"));
  EXPECT_FALSE(s.resolve("text_encoder_2"));
}

TEST(PipelineQuantizationConfig, EmptyListQuantizesEveryComponent) {
  auto q = PipelineQuantizationConfig::from_json({{"quant_backend", "quanto"}, {"quant_kwargs", {{"weights_dtype", "int8"}}}});
  for (const char* c : {"transformer", "vae", "text_encoder", "text_encoder_2"}) EXPECT_TRUE(q.resolve(c)) << c;
}

TEST(PipelineQuantizationConfig, GranularModeUsesTheMappingOnly) {
  auto q = PipelineQuantizationConfig::from_json(
      {{"quant_mapping",
        {{"transformer", {{"quant_backend", "torchao"}, {"quant_kwargs", {{"quant_type", "int8wo"}}}}},
         {"text_encoder_2", {{"_class", "BitsAndBytesConfig"}, {"load_in_8bit", true}}}}}});
  EXPECT_TRUE(q.is_granular());
  EXPECT_EQ(q.resolve("transformer")->backend, "torchao");
  EXPECT_EQ(q.resolve("text_encoder_2")->backend, "bitsandbytes_8bit");
  EXPECT_EQ(q.resolve("text_encoder_2")->kwargs, json({{"load_in_8bit", true}}));
  EXPECT_FALSE(q.resolve("vae"));
  EXPECT_EQ(PipelineQuantizationConfig::from_json(q.to_json()).to_json(), q.to_json());
}

TEST(PipelineQuantizationConfig, DiffusersValidationErrors) {
  EXPECT_NE(error_of({{"quant_backend", "torchao"},
                      {"quant_kwargs", {{"quant_type", "int8wo"}}},
                      {"quant_mapping", {{"vae", {{"quant_backend", "torchao"}}}}}})
                .find("cannot be specified at the same time"),
            std::string::npos);
  EXPECT_NE(error_of(json::object()).find("Must provide a `quant_backend`"), std::string::npos);
  EXPECT_NE(error_of({{"quant_backend", "torchao"}}).find("`quant_kwargs` and `quant_mapping` cannot be None"),
            std::string::npos);
  const std::string unknown = error_of({{"quant_backend", "int3magic"}, {"quant_kwargs", {{"a", 1}}}});
  EXPECT_NE(unknown.find("quant_backend=int3magic was not found"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("bitsandbytes_4bit"), std::string::npos) << unknown;
  EXPECT_NE(error_of({{"quant_backend", "modelopt"}, {"quant_kwargs", {{"a", 1}}}}).find("does not implement"),
            std::string::npos);
  EXPECT_NE(error_of({{"quant_mapping", {{"transformer", {{"_class", "HqqConfig"}}}}}})
                .find("module_name=transformer could not be found"),
            std::string::npos);
  EXPECT_NE(error_of({{"quant_backend", "torchao"}, {"quant_kwargs", {{"quant_type", "int8wo"}}}, {"components", 1}})
                .find("unknown key 'components'"),
            std::string::npos);
}

TEST(PipelineQuantizationConfig, UnknownComponentsOnlyWarn) {
  auto q = PipelineQuantizationConfig::from_json({{"quant_backend", "torchao"},
                                                  {"quant_kwargs", {{"quant_type", "int8wo"}}},
                                                  {"components_to_quantize", {"transformer", "unet"}}});
  const std::string w = q.unknown_components_warning({"transformer", "vae", "text_encoder"});
  EXPECT_NE(w.find("{unet}"), std::string::npos) << w;
  EXPECT_EQ(q.unknown_components_warning({"transformer", "unet"}), "");
}

}  // namespace
