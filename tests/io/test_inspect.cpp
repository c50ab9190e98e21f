// `diffq inspect` summaries (src/io/inspect.h), which the CLI prints as text or --json.
#include <gtest/gtest.h>

#include "io/inspect.h"
#include "io_test_util.h"

using namespace diffq;
using namespace diffq::io;
using namespace diffq::io::testing;
namespace fs = std::filesystem;

TEST(Inspect, DiffusersPipeline) {
  const auto j = inspect_json(fixture_dir() / "pipeline");
  EXPECT_EQ(j["kind"], "diffusers_pipeline");
  EXPECT_EQ(j["pipeline_class"], "FluxPipeline");
  ASSERT_EQ(j["components"].size(), 5u);
  const auto& vae = j["components"][4];
  EXPECT_EQ(vae["name"], "vae");
  EXPECT_EQ(vae["library"], "diffusers");
  EXPECT_EQ(vae["class_name"], "AutoencoderKL");
  ASSERT_EQ(vae["weights"].size(), 2u);
  const auto& def = vae["weights"][0];
  const auto& exp = expected()["pipeline"]["components"]["vae"]["default"];
  EXPECT_EQ(def["tensor_count"].get<size_t>(), exp.size());
  uint64_t params = 0, bytes = 0;
  for (const auto& [n, e] : exp.items()) {
    uint64_t numel = 1;
    for (const auto& d : e["shape"]) numel *= d.get<uint64_t>();
    params += numel;
    bytes += e["nbytes"].get<uint64_t>();
  }
  EXPECT_EQ(def["parameters"].get<uint64_t>(), params);
  EXPECT_EQ(def["bytes"].get<uint64_t>(), bytes);
  // Diffusers' index total_size is the same byte count.
  const auto idx = inspect_json(fixture_dir() / "pipeline" / "vae" / "diffusion_pytorch_model.safetensors.index.json");
  EXPECT_EQ(idx["index_metadata"]["total_size"].get<uint64_t>(), bytes);
  EXPECT_EQ(def["dtypes"], nlohmann::ordered_json::parse(cat(R"({"F32":)", exp.size(), "}")));
  EXPECT_EQ(vae["weights"][1]["variant"], "fp16");
  EXPECT_EQ(vae["weights"][1]["dtypes"]["F16"].get<size_t>(), exp.size());

  const std::string text = inspect_text(j);
  EXPECT_NE(text.find("FluxPipeline"), std::string::npos) << text;
  EXPECT_NE(text.find("vae: diffusers.AutoencoderKL"), std::string::npos) << text;
  EXPECT_NE(text.find(cat("default: ", exp.size(), " tensors (F32 x", exp.size(), ")")), std::string::npos) << text;
  EXPECT_NE(text.find("5 files (sharded)"), std::string::npos) << text;
  EXPECT_NE(text.find("scheduler: diffusers.FlowMatchEulerDiscreteScheduler  (no weights)"), std::string::npos);
  EXPECT_NE(text.find("not present: feature_extractor, image_encoder, text_encoder_2, tokenizer_2"), std::string::npos);
}

TEST(Inspect, ShowsQuantizationConfig) {
  TempDir tmp;
  const fs::path p = tmp / "pipe";
  fs::copy(fixture_dir() / "pipeline", p, fs::copy_options::recursive);
  std::ifstream in(p / "transformer" / "config.json");
  nlohmann::json cfg = nlohmann::json::parse(in);
  in.close();
  cfg["quantization_config"] = {{"quant_method", "bitsandbytes"}, {"load_in_4bit", true},
                                {"bnb_4bit_quant_type", "nf4"}};
  write_text(p / "transformer" / "config.json", cfg.dump());
  const auto j = inspect_json(p);
  EXPECT_EQ(j["components"][3]["quantization_config"]["bnb_4bit_quant_type"], "nf4");
  EXPECT_FALSE(j["components"][4].contains("quantization_config"));
  const std::string text = inspect_text(j);
  EXPECT_NE(text.find("quantization_config: {\"bnb_4bit_quant_type\":\"nf4\""), std::string::npos) << text;
}

TEST(Inspect, SafetensorsFileTable) {
  const auto j = inspect_json(fixture_dir() / "all_dtypes.safetensors");
  EXPECT_EQ(j["kind"], "safetensors");
  EXPECT_EQ(j["metadata"]["format"], "pt");
  EXPECT_EQ(j["tensor_count"].get<size_t>(), expected()["all_dtypes"]["tensors"].size());
  EXPECT_EQ(j["dtypes"]["F32"].get<int>(), 4);
  bool saw = false;
  for (const auto& r : j["tensors"])
    if (r["name"] == "bf16") {
      saw = true;
      EXPECT_EQ(r["dtype"], "BF16");
      EXPECT_EQ(r["shape"], nlohmann::ordered_json::parse("[2,6]"));
      EXPECT_EQ(r["bytes"].get<int>(), 24);
    }
  EXPECT_TRUE(saw);
  const std::string text = inspect_text(j);
  EXPECT_NE(text.find("metadata format = \"pt\""), std::string::npos) << text;
  EXPECT_NE(text.find("f8_e4m3  F8_E4M3  [8]"), std::string::npos) << text;
}

TEST(Inspect, GGUFFile) {
  const auto j = inspect_json(fixture_dir() / "tiny.gguf");
  EXPECT_EQ(j["kind"], "gguf");
  EXPECT_EQ(j["version"].get<int>(), 3);
  EXPECT_EQ(j["metadata"]["general.architecture"], "diffq-test");
  EXPECT_EQ(j["types"]["Q8_0"].get<int>(), 1);
  ASSERT_EQ(j["tensors"].size(), 5u);
  EXPECT_EQ(j["tensors"][3]["name"], "q8_0");
  EXPECT_EQ(j["tensors"][3]["shape"], nlohmann::ordered_json::parse("[2,64]"));
  EXPECT_EQ(j["tensors"][3]["bytes"].get<int>(), 136);
  const std::string text = inspect_text(j);
  EXPECT_NE(text.find("q4_0  Q4_0  [3, 64]  108 B"), std::string::npos) << text;
  EXPECT_NE(text.find("test.arr_nested = [[1,2],[3]]"), std::string::npos) << text;
}

TEST(Inspect, ModelFolderAndErrors) {
  const auto j = inspect_json(fixture_dir() / "pipeline" / "text_encoder");
  EXPECT_EQ(j["kind"], "model_folder");
  EXPECT_EQ(j["weights"].size(), 2u);
  EXPECT_EQ(j["weights"][0]["files"].size(), 2u);
  expect_error([] { inspect_json("/nonexistent/path"); }, {"[inspect]", "does not exist"});
  TempDir tmp;
  expect_error([&] { inspect_json(tmp.path()); }, {"neither model_index.json nor safetensors"});
  write_text(tmp / "bad.safetensors", "short");
  expect_error([&] { inspect_json(tmp / "bad.safetensors"); }, {"[safetensors]", "too short"});
}

TEST(Inspect, FormatCount) {
  EXPECT_EQ(format_count(17), "17");
  EXPECT_EQ(format_count(4752), "4.8K");
  EXPECT_EQ(format_count(11'901'408'320ull), "11.9B");
}
