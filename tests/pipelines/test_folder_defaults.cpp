// A model folder's generation_defaults.json (src/pipelines/folder_defaults.h): the pipeline's defaults() and a
// generation with nothing set use it; an explicit parameter wins; a bad file is an error naming the file,
// the key and the value. The folder is tests/fixtures/tiny-flux with the file added (components symlinked).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

#include "diffq/error.h"
#include "diffq/pipeline.h"

namespace fs = std::filesystem;

namespace {
const fs::path kTiny = DIFFQ_SOURCE_DIR "/tests/fixtures/tiny-flux";

struct TempFolder {
  fs::path dir = fs::temp_directory_path() / ("diffq_defaults_" + std::to_string(::getpid()));
  explicit TempFolder(const std::string& defaults_json) {
    fs::remove_all(dir);
    fs::create_directories(dir);
    for (const auto& e : fs::directory_iterator(kTiny)) {
      if (e.is_directory()) fs::create_directory_symlink(fs::canonical(e.path()), dir / e.path().filename());
      else fs::copy_file(e.path(), dir / e.path().filename());
    }
    if (!defaults_json.empty()) std::ofstream(dir / "generation_defaults.json") << defaults_json;
  }
  ~TempFolder() { fs::remove_all(dir); }
};

std::string load_error(const std::string& json) {
  TempFolder t(json);
  try {
    diffq::DiffusionPipeline::from_pretrained(t.dir);
  } catch (const diffq::Error& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(FolderDefaults, UsedByDefaultsAndGenerate) {
  TempFolder t(R"({"_comment": "x", "height": 32, "width": 48, "num_inference_steps": 3, "max_sequence_length": 16,
                   "true_cfg_scale": 2.5, "negative_prompt": ""})");
  auto pipe = diffq::DiffusionPipeline::from_pretrained(t.dir);
  const auto d = pipe->defaults();
  EXPECT_EQ(d.height, 32);
  EXPECT_EQ(d.width, 48);
  EXPECT_EQ(d.num_inference_steps, 3);
  EXPECT_EQ(d.max_sequence_length, 16);
  EXPECT_EQ(d.true_cfg_scale.value_or(0), 2.5);
  diffq::GenerateParams p;
  p.prompt = "a red circle";
  p.output_latents_only = true;
  int64_t calls = 0;
  p.on_step = [&](int64_t, int64_t, float) { return ++calls, true; };
  const auto r = pipe->generate(p);
  EXPECT_EQ(r.used.width, 48);
  EXPECT_EQ(r.used.height, 32);
  EXPECT_EQ(r.used.max_sequence_length, 16);
  EXPECT_EQ(r.used.true_cfg_scale.value_or(0), 2.5);
  EXPECT_EQ(calls, 3);
  // True CFG ran (with the default negative ""): the plain folder with the same call but no negative prompt
  // runs without CFG (Diffusers: true CFG needs a negative) and gives other latents.
  auto plain = diffq::DiffusionPipeline::from_pretrained(kTiny);
  diffq::GenerateParams q = p;
  q.on_step = nullptr;
  q.width = 48, q.height = 32, q.num_inference_steps = 3, q.max_sequence_length = 16, q.true_cfg_scale = 2.5;
  const auto no_cfg = plain->generate(q);
  EXPECT_NE(r.latents.to_f32_vector(), no_cfg.latents.to_f32_vector())
      << "the default true_cfg_scale / negative_prompt were not applied";
  // explicit parameters win over the folder's
  diffq::GenerateParams e = p;
  e.on_step = nullptr;
  e.width = 64, e.height = 64, e.num_inference_steps = 2, e.true_cfg_scale = 1.0;
  const auto re = pipe->generate(e);
  EXPECT_EQ(re.used.width, 64);
  EXPECT_EQ(re.steps_run, 2);
  EXPECT_EQ(re.used.true_cfg_scale.value_or(0), 1.0);
}

TEST(FolderDefaults, BadFileNamesFileKeyAndValue) {
  const auto unknown = load_error(R"({"height": 64, "num_steps": 20})");
  EXPECT_NE(unknown.find("generation_defaults.json"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("num_steps"), std::string::npos) << unknown;
  const auto type = load_error(R"({"width": "64"})");
  EXPECT_NE(type.find("'width'"), std::string::npos) << type;
  const auto range = load_error(R"({"true_cfg_scale": -1})");
  EXPECT_NE(range.find("true_cfg_scale"), std::string::npos) << range;
  EXPECT_NE(range.find("-1"), std::string::npos) << range;
  const auto zero = load_error(R"({"num_inference_steps": 0})");
  EXPECT_NE(zero.find("num_inference_steps"), std::string::npos) << zero;
  const auto syntax = load_error(R"({"height": 64,)");
  EXPECT_NE(syntax.find("generation_defaults.json"), std::string::npos) << syntax;
  EXPECT_EQ(load_error(""), "");  // no file: FluxPipeline's own defaults
}
