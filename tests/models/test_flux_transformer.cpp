// FluxTransformer2DModel against Diffusers 0.42.1 (tests/fixtures/tiny-flux/reference/
// transformer_forward.safetensors, made by tools/reference/make_tiny_flux.py) and the BFL single-file
// naming (tests/fixtures/tiny-flux-single-file, made by tools/reference/make_flux_single_file.py).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "common/max_rel.h"
#include "diffq/error.h"
#include "io/diffusers_folder.h"
#include "io/safetensors.h"
#include "models/flux/flux_keys.h"
#include "models/flux/flux_transformer.h"

using namespace diffq;
using namespace diffq::models::flux;

namespace {

const std::filesystem::path kRoot = DIFFQ_SOURCE_DIR;
const std::filesystem::path kDev = kRoot / "tests/fixtures/tiny-flux";
const std::filesystem::path kSchnell = kRoot / "tests/fixtures/tiny-flux-schnell";
const std::filesystem::path kSingleFile = kRoot / "tests/fixtures/tiny-flux-single-file/flux1-tiny-dev.safetensors";

// max |a - b| / max |b|
using diffq::testing::max_rel;

struct Inputs {
  Tensor hidden, encoder, pooled, timestep, guidance, txt_ids, img_ids;
};

Inputs read_inputs(const io::SafetensorsFile& f) {
  return {f.tensor("in.hidden_states"), f.tensor("in.encoder_hidden_states"), f.tensor("in.pooled_projections"),
          f.tensor("in.timestep"),      f.tensor("in.guidance"),              f.tensor("in.txt_ids"),
          f.tensor("in.img_ids")};
}

Tensor run(FluxTransformer2DModel& m, const Inputs& in, FluxIntermediates* mids = nullptr, bool guidance = true) {
  return m(in.hidden, in.encoder, in.pooled, in.timestep, guidance ? in.guidance : Tensor(), in.txt_ids, in.img_ids,
           mids);
}

io::SafetensorsFile reference() { return io::SafetensorsFile::open(kDev / "reference/transformer_forward.safetensors"); }

}  // namespace

TEST(FluxTransformer, ConfigFromFixture) {
  const auto folder = io::DiffusersFolder::open(kDev);
  const auto cfg = FluxTransformerConfig::from_json(folder.component("transformer").config);
  EXPECT_EQ(cfg.in_channels, 16);
  EXPECT_EQ(cfg.out_channels, 16);  // null -> in_channels
  EXPECT_EQ(cfg.num_layers, 2);
  EXPECT_EQ(cfg.num_single_layers, 2);
  EXPECT_EQ(cfg.inner_dim(), 32);
  EXPECT_TRUE(cfg.guidance_embeds);
  EXPECT_EQ(cfg.axes_dims_rope, (std::vector<int64_t>{4, 6, 6}));

  // Diffusers' defaults when keys are absent (FLUX.1 sizes).
  const auto def = FluxTransformerConfig::from_json(io::JsonConfig(nlohmann::json::object(), "config.json"));
  EXPECT_EQ(def.inner_dim(), 3072);
  EXPECT_EQ(def.out_channels, 64);
  EXPECT_EQ(def.num_layers, 19);
  EXPECT_EQ(def.num_single_layers, 38);
  EXPECT_FALSE(def.guidance_embeds);

  nlohmann::json bad = {{"attention_head_dim", 16}, {"axes_dims_rope", {4, 6, 8}}};
  EXPECT_THROW(FluxTransformerConfig::from_json(io::JsonConfig(bad, "config.json")), Error);
}

TEST(FluxTransformer, ParameterNamesAreDiffusersKeys) {
  const auto folder = io::DiffusersFolder::open(kDev);
  FluxTransformer2DModel m(FluxTransformerConfig::from_json(folder.component("transformer").config));
  const StateDict sd = folder.load_state_dict("transformer");
  EXPECT_EQ(m.named_parameters().size(), sd.size());
  for (const auto& [name, p] : m.named_parameters()) EXPECT_TRUE(sd.count(name)) << name;
  EXPECT_NE(m.find_module("transformer_blocks.1.attn.to_out.0"), nullptr);
  EXPECT_NE(m.find_module("transformer_blocks.0.ff_context.net.2"), nullptr);
  EXPECT_NE(m.find_module("single_transformer_blocks.1.attn.norm_k"), nullptr);
  EXPECT_EQ(m.find_module("single_transformer_blocks.0.attn.to_out"), nullptr);
}

TEST(FluxTransformer, ForwardMatchesDiffusersFp32) {
  auto m = FluxTransformer2DModel::from_pretrained(kDev / "transformer");
  const auto ref = reference();
  FluxIntermediates mids;
  const Tensor out = run(*m, read_inputs(ref), &mids);
  // Every intermediate, in forward order, so the first one off localises a bug.
  for (const std::string& name : ref.names()) {
    if (name.rfind("mid.", 0) != 0) continue;
    const std::string key = name.substr(4);
    ASSERT_TRUE(mids.count(key)) << key;
    const double e = max_rel(mids[key], ref.tensor(name));
    EXPECT_LE(e, 1e-4) << name;
  }
  const double e = max_rel(out, ref.tensor("out"));
  EXPECT_LE(e, 1e-4);
  std::printf("[flux] fp32 forward: max rel err %.3g\n", e);
}

TEST(FluxTransformer, ForwardBf16WithinTolerance) {
  LoadOptions opt;
  opt.dtype = DType::bf16;
  auto m = FluxTransformer2DModel::from_pretrained(kDev / "transformer", opt);
  EXPECT_EQ(m->compute_dtype(), DType::bf16);
  const auto ref = reference();
  Inputs in = read_inputs(ref);
  in.hidden = in.hidden.to(DType::bf16);
  in.encoder = in.encoder.to(DType::bf16);
  in.pooled = in.pooled.to(DType::bf16);
  const Tensor out = run(*m, in);
  EXPECT_EQ(out.dtype(), DType::bf16);
  // Diffusers' own bf16 forward (tools/reference/make_flux_single_file.py) is the bf16 reference: the bf16
  // model itself lies ~4e-2 off the fp32 output (t*1000 rounds in bf16), so 1e-2 applies against it.
  const auto bf16_ref =
      io::SafetensorsFile::open(kRoot / "tests/fixtures/tiny-flux-single-file/transformer_forward_bf16.safetensors");
  const double e = max_rel(out, bf16_ref.tensor("out"));
  EXPECT_LE(e, 1e-2);
  const double e32 = max_rel(out, ref.tensor("out"));
  const double torch_e32 = max_rel(bf16_ref.tensor("out"), ref.tensor("out"));
  EXPECT_LE(e32, 1.25 * torch_e32);  // no further from the fp32 truth than Diffusers' bf16 run
  std::printf("[flux] bf16 forward: max rel err %.3g vs Diffusers bf16, %.3g vs fp32 (Diffusers bf16: %.3g)\n", e,
              e32, torch_e32);
}

TEST(FluxTransformer, SchnellLoadsAndRunsWithoutGuidance) {
  auto m = FluxTransformer2DModel::from_pretrained(kSchnell / "transformer");
  EXPECT_FALSE(m->config.guidance_embeds);
  EXPECT_EQ(m->time_text_embed.guidance_embedder, nullptr);
  const Inputs in = read_inputs(reference());
  const Tensor out = run(*m, in, nullptr, /*guidance=*/false);
  EXPECT_EQ(out.shape(), (Shape{2, 64, 16}));
  for (double v : out.to_f64_vector()) ASSERT_TRUE(std::isfinite(v));
  // Passing guidance to a model without a guidance embedder is an error (Diffusers raises too).
  EXPECT_THROW(run(*m, in, nullptr, true), Error);
}

TEST(FluxTransformer, DevWithoutGuidanceIsAnError) {
  auto m = FluxTransformer2DModel::from_pretrained(kDev / "transformer");
  try {
    run(*m, read_inputs(reference()), nullptr, /*guidance=*/false);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[flux]"), std::string::npos) << e.what();
  }
}

TEST(FluxKeys, DetectsAndConvertsBflSingleFile) {
  const auto file = io::SafetensorsFile::open(kSingleFile);
  const StateDict bfl = file.tensors();
  ASSERT_TRUE(is_bfl_flux_state_dict(bfl));
  const StateDict diffusers = io::DiffusersFolder::open(kDev).load_state_dict("transformer");
  EXPECT_FALSE(is_bfl_flux_state_dict(diffusers));

  const FluxTransformerConfig dev_cfg = FluxTransformerConfig::from_json(
      io::DiffusersFolder::open(kDev).component("transformer").config);
  const FluxTransformerConfig cfg = infer_bfl_flux_config(bfl, dev_cfg);
  EXPECT_EQ(cfg.num_layers, 2);
  EXPECT_EQ(cfg.num_single_layers, 2);
  EXPECT_EQ(cfg.num_attention_heads, 2);
  EXPECT_EQ(cfg.attention_head_dim, 16);
  EXPECT_EQ(cfg.in_channels, 16);
  EXPECT_EQ(cfg.out_channels, 16);
  EXPECT_EQ(cfg.joint_attention_dim, 8);
  EXPECT_EQ(cfg.pooled_projection_dim, 8);
  EXPECT_TRUE(cfg.guidance_embeds);

  const StateDict conv = convert_bfl_flux_to_diffusers(bfl, cfg);
  ASSERT_EQ(conv.size(), diffusers.size());
  for (const auto& [k, v] : diffusers) {
    ASSERT_TRUE(conv.count(k)) << k;
    EXPECT_EQ(max_rel(conv.at(k), v), 0.0) << k;  // bit-exact, norm_out halves included
  }
  // Row splits are views of the file's bytes (no copy).
  const Tensor qkv = bfl.at(std::string(kBflPrefix) + "double_blocks.0.img_attn.qkv.weight");
  const Tensor& k = conv.at("transformer_blocks.0.attn.to_k.weight");
  EXPECT_EQ(k.storage(), qkv.storage());
  EXPECT_EQ(static_cast<const char*>(k.data_ptr()),
            static_cast<const char*>(qkv.data_ptr()) + 32 * 32 * sizeof(float));
}

TEST(FluxKeys, ConvertedModelEqualsDiffusersTwin) {
  const StateDict bfl = io::SafetensorsFile::open(kSingleFile).tensors();
  FluxTransformerConfig base;
  base.axes_dims_rope = {4, 6, 6};  // not recorded in the weights
  const FluxTransformerConfig cfg = infer_bfl_flux_config(bfl, base);
  FluxTransformer2DModel single(cfg);
  load_state_dict(single, convert_bfl_flux_to_diffusers(bfl, cfg));
  auto twin = FluxTransformer2DModel::from_pretrained(kDev / "transformer");
  const Inputs in = read_inputs(reference());
  EXPECT_EQ(max_rel(run(single, in), run(*twin, in)), 0.0);
}

TEST(FluxKeys, ErrorsNameTheProblem) {
  StateDict bfl = io::SafetensorsFile::open(kSingleFile).tensors();
  const FluxTransformerConfig cfg = infer_bfl_flux_config(bfl, {});
  // A stray key under the transformer prefix is reported; keys outside it (vae., text encoders) are not.
  StateDict extra = bfl;
  extra["vae.decoder.conv_in.weight"] = Tensor::zeros({1}, DType::f32);
  EXPECT_NO_THROW(convert_bfl_flux_to_diffusers(extra, cfg));
  extra[std::string(kBflPrefix) + "double_blocks.0.img_attn.lora_up.weight"] = Tensor::zeros({1}, DType::f32);
  try {
    convert_bfl_flux_to_diffusers(extra, cfg);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("lora_up"), std::string::npos) << e.what();
  }
  StateDict missing = bfl;
  missing.erase(std::string(kBflPrefix) + "single_blocks.1.linear1.bias");
  EXPECT_THROW(convert_bfl_flux_to_diffusers(missing, cfg), Error);
  StateDict not_flux;
  not_flux["x_embedder.weight"] = Tensor::zeros({1}, DType::f32);
  EXPECT_FALSE(is_bfl_flux_state_dict(not_flux));
  EXPECT_THROW(convert_bfl_flux_to_diffusers(not_flux, cfg), Error);
}
