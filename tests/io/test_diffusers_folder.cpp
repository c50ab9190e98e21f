// Diffusers pipeline folders: the tiny FluxPipeline saved by save_pretrained (sharded, variants).
#include <gtest/gtest.h>

#include "io/diffusers_folder.h"
#include "io_test_util.h"

using namespace diffq;
using namespace diffq::io;
using namespace diffq::io::testing;
namespace fs = std::filesystem;

namespace {
fs::path pipeline_dir() { return fixture_dir() / "pipeline"; }
const nlohmann::json& exp_pipe() { return expected()["pipeline"]; }

// Copies the fixture pipeline into a temp dir so a test can damage it.
fs::path copy_pipeline(const TempDir& dir) {
  const fs::path dst = dir / "pipe";
  fs::copy(pipeline_dir(), dst, fs::copy_options::recursive);
  return dst;
}
}  // namespace

TEST(DiffusersFolder, ParsesModelIndex) {
  const DiffusersFolder d = DiffusersFolder::open(pipeline_dir());
  EXPECT_EQ(d.pipeline_class(), "FluxPipeline");
  EXPECT_EQ(d.diffusers_version(), exp_pipe()["model_index"]["_diffusers_version"].get<std::string>());
  std::vector<std::string> names;
  for (const auto& c : d.components()) names.push_back(c.name);
  EXPECT_EQ(names, (std::vector<std::string>{"scheduler", "text_encoder", "tokenizer", "transformer", "vae"}));
  EXPECT_EQ(d.skipped_components(),
            (std::vector<std::string>{"feature_extractor", "image_encoder", "text_encoder_2", "tokenizer_2"}));
  for (const auto& c : d.components()) {
    const auto& want = exp_pipe()["model_index"][c.name];
    EXPECT_EQ(c.library, want[0].get<std::string>()) << c.name;
    EXPECT_EQ(c.class_name, want[1].get<std::string>()) << c.name;
    EXPECT_EQ(c.dir, pipeline_dir() / c.name);
  }
  EXPECT_TRUE(d.has_component("vae"));
  EXPECT_FALSE(d.has_component("text_encoder_2"));
  expect_error([&] { d.component("text_encoder_2"); },
               {"[diffusers]", "no component 'text_encoder_2'", "scheduler, text_encoder"});
}

TEST(DiffusersFolder, ConfigsWithTypedAccessors) {
  const DiffusersFolder d = DiffusersFolder::open(pipeline_dir());
  const Component& vae = d.component("vae");
  EXPECT_EQ(vae.config_path.filename(), "config.json");
  EXPECT_EQ(vae.config.get<std::string>("_class_name", ""), "AutoencoderKL");
  EXPECT_EQ(vae.config.require<std::vector<int64_t>>("block_out_channels"), (std::vector<int64_t>{8, 16}));
  EXPECT_EQ(vae.config.require<int>("latent_channels"), 1);
  EXPECT_EQ(vae.config.get<double>("not_there", 0.5), 0.5);
  EXPECT_EQ(vae.quantization_config(), nullptr);
  const Component& sched = d.component("scheduler");
  EXPECT_EQ(sched.config_path.filename(), "scheduler_config.json");
  EXPECT_EQ(sched.config.require<double>("shift"), 3.0);
  EXPECT_TRUE(sched.config.require<bool>("use_dynamic_shifting"));
  EXPECT_EQ(sched.config.require<int64_t>("num_train_timesteps"), 1000);
  expect_error([&] { sched.config.require<int>("shift"); },
               {"[config]", "scheduler/scheduler_config.json", "'shift'", "3.0", "expected an integer"});
  expect_error([&] { sched.config.require<std::string>("use_dynamic_shifting"); },
               {"'use_dynamic_shifting'", "true", "expected a string"});
  expect_error([&] { vae.config.require<int>("nope"); },
               {"vae/config.json", "required key 'nope' is missing"});
  const Component& tok = d.component("tokenizer");
  EXPECT_TRUE(tok.config_path.empty());
  EXPECT_FALSE(tok.has_weights());
  EXPECT_FALSE(sched.has_weights());
}

TEST(DiffusersFolder, WeightDiscovery) {
  const DiffusersFolder d = DiffusersFolder::open(pipeline_dir());
  EXPECT_EQ(d.component("vae").variants, (std::vector<std::string>{"", "fp16"}));
  EXPECT_EQ(d.component("text_encoder").variants, (std::vector<std::string>{"", "fp16"}));
  EXPECT_EQ(d.component("transformer").variants, (std::vector<std::string>{"", "fp16"}));

  const WeightFiles vae = d.weight_files("vae");
  ASSERT_TRUE(vae.index.has_value());
  EXPECT_EQ(vae.index->filename(), "diffusion_pytorch_model.safetensors.index.json");
  ASSERT_EQ(vae.files.size(), 5u);
  EXPECT_EQ(vae.files[0].filename(), "diffusion_pytorch_model-00001-of-00005.safetensors");
  const WeightFiles vae16 = d.weight_files("vae", "fp16");
  EXPECT_EQ(vae16.index->filename(), "diffusion_pytorch_model.safetensors.index.fp16.json");
  ASSERT_EQ(vae16.files.size(), 3u);
  EXPECT_EQ(vae16.files[2].filename(), "diffusion_pytorch_model.fp16-00003-of-00003.safetensors");

  const WeightFiles te = d.weight_files("text_encoder");
  EXPECT_EQ(te.index->filename(), "model.safetensors.index.json");
  EXPECT_EQ(te.files.size(), 2u);
  const WeightFiles te16 = d.weight_files("text_encoder", "fp16");
  EXPECT_FALSE(te16.index.has_value());
  ASSERT_EQ(te16.files.size(), 1u);
  EXPECT_EQ(te16.files[0].filename(), "model.fp16.safetensors");
  const WeightFiles tr16 = d.weight_files("transformer", "fp16");
  EXPECT_EQ(tr16.files[0].filename(), "diffusion_pytorch_model.fp16.safetensors");

  expect_error([&] { d.weight_files("vae", "bf16"); },
               {"[diffusers]", "variant 'bf16'", "vae", "variants present: default, fp16"});
  expect_error([&] { d.weight_files("tokenizer"); }, {"'tokenizer'", "has no weights"});
}

TEST(DiffusersFolder, LoadsStateDictsMatchingPython) {
  const DiffusersFolder d = DiffusersFolder::open(pipeline_dir());
  for (const auto& [name, variants] : exp_pipe()["components"].items()) {
    for (const auto& [variant, tensors] : variants.items()) {
      SCOPED_TRACE(name + " " + variant);
      const StateDict sd = d.load_state_dict(name, variant == "default" ? "" : variant);
      ASSERT_EQ(sd.size(), tensors.size());
      for (const auto& [tname, e] : tensors.items()) {
        const auto it = sd.find(tname);
        ASSERT_NE(it, sd.end()) << tname;
        const Tensor& t = it->second;
        EXPECT_EQ(std::string(safetensors_dtype_name(t.dtype())), e["dtype"].get<std::string>()) << tname;
        EXPECT_EQ(t.shape(), e["shape"].get<Shape>()) << tname;
        EXPECT_EQ(fnv1a64(t.data_ptr(), t.nbytes()), e["fnv1a64"].get<std::string>()) << tname;
        EXPECT_FALSE(t.storage()->owns_allocation()) << tname;  // zero-copy
      }
    }
  }
  // Parameter names are the checkpoint keys.
  const StateDict tr = d.load_state_dict("transformer");
  EXPECT_TRUE(tr.count("x_embedder.weight"));
  EXPECT_EQ(tr.at("x_embedder.weight").dtype(), DType::f32);
  EXPECT_EQ(d.load_state_dict("transformer", "fp16").at("x_embedder.weight").dtype(), DType::f16);
}

TEST(DiffusersFolder, ErrorsNameTheFileFieldOrValue) {
  TempDir tmp;
  expect_error([&] { DiffusersFolder::open(tmp.path()); }, {"[diffusers]", "no model_index.json", tmp.path().string()});
  expect_error([&] { DiffusersFolder::open(tmp / "nope"); }, {"is not a folder"});

  const fs::path p = copy_pipeline(tmp);
  fs::remove_all(p / "vae");
  expect_error([&] { DiffusersFolder::open(p); },
               {"component 'vae'", "diffusers.AutoencoderKL", "has no folder", (p / "vae").string()});

  const fs::path q = tmp / "q";
  fs::copy(pipeline_dir(), q, fs::copy_options::recursive);
  fs::remove(q / "vae" / "diffusion_pytorch_model-00003-of-00005.safetensors");
  const DiffusersFolder d = DiffusersFolder::open(q);  // opening is lazy about weights
  expect_error([&] { d.load_state_dict("vae"); },
               {"weight_map of", "diffusion_pytorch_model.safetensors.index.json",
                "missing shard diffusion_pytorch_model-00003-of-00005.safetensors"});
  EXPECT_EQ(d.load_state_dict("vae", "fp16").size(), expected()["pipeline"]["components"]["vae"]["fp16"].size());

  write_text(q / "model_index.json", R"({"_diffusers_version":"0.1","vae":["diffusers","AutoencoderKL"]})");
  expect_error([&] { DiffusersFolder::open(q); }, {"model_index.json", "required key '_class_name' is missing"});
  write_text(q / "model_index.json", R"({"_class_name":"X", "vae": ["diffusers")");
  expect_error([&] { DiffusersFolder::open(q); }, {"model_index.json", "not valid JSON"});
  write_text(q / "model_index.json", R"({"_class_name":"X","vae":["diffusers","AutoencoderKL"],"boundary_ratio":null,"expand_timesteps":false,"text_encoder_2":[null,null]})");
  const DiffusersFolder s = DiffusersFolder::open(q);
  EXPECT_EQ(s.settings(), nlohmann::json::parse(R"({"boundary_ratio":null,"expand_timesteps":false})"));
  EXPECT_EQ(s.skipped_components(), (std::vector<std::string>{"text_encoder_2"}));
  write_text(q / "vae" / "config.json", "[1]");
  expect_error([&] { DiffusersFolder::open(q); }, {"config.json", "not a JSON object"});

  // Only pickle weights: found (PyTorch checkpoints load since issue 19), but this one is no zip.
  fs::create_directories(tmp / "bin_only");
  write_text(tmp / "bin_only" / "diffusion_pytorch_model.bin", "x");
  const WeightFiles bin = find_weight_files(tmp / "bin_only");
  ASSERT_EQ(bin.files.size(), 1u);
  EXPECT_EQ(bin.files[0].filename(), "diffusion_pytorch_model.bin");
  expect_error([&] { load_weight_files(bin); }, {"diffusion_pytorch_model.bin", "not a PyTorch zip checkpoint"});
  fs::create_directories(tmp / "no_weights");
  expect_error([&] { find_weight_files(tmp / "no_weights"); }, {"variants present: none"});
}
