// Single-file Wan transformers (wan_single_file.h) against Diffusers 0.42.1's
// WanTransformer3DModel.from_single_file on the same files (tests/fixtures/wan-single-file/,
// tools/reference/make_wan_single_file.py):
// - the original Wan / ComfyUI naming in safetensors (t2v fp16 under "model.diffusion_model.", ti2v bf16
//   without prefix), Diffusers' naming in one file (wan-transformer/t2v's weights file);
// - a city96-style GGUF with mixed ggml types (5-D F32 patch embedding, Q8_0 ... Q6_K, BF16, F16).
// Bounds: 1e-4 (fp32) against Diffusers; GGUF also 1e-4 against Diffusers with gguf-py's f32
// dequantization and 1e-3 against Diffusers' own GGUF path (its dequantize computes in float16:
// 5.4e-4 between the two on this file).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "common/max_rel.h"
#include "diffq/error.h"
#include "io/gguf.h"
#include "io/gguf_writer.h"
#include "io/json_config.h"
#include "io/safetensors.h"
#include "models/wan/wan_builtin.h"
#include "models/wan/wan_keys.h"
#include "models/wan/wan_single_file.h"
#include "quant/gguf/gguf_weight.h"

using namespace diffq;
using namespace diffq::models::wan;
namespace fs = std::filesystem;

namespace {

const fs::path kRoot = DIFFQ_SOURCE_DIR;
const fs::path kDir = kRoot / "tests/fixtures/wan-single-file";
const fs::path kWan = kRoot / "tests/fixtures/wan-transformer";
const fs::path kComfy = kDir / "wan2.1_t2v_tiny_comfy.safetensors";
const fs::path kTi2v = kDir / "wan2.2_ti2v_tiny.safetensors";
const fs::path kGGUF = kDir / "gguf/wan-tiny-mixed.gguf";
constexpr double kF32Bound = 1e-4, kDiffusersGGUFBound = 1e-3;

using diffq::testing::max_rel;

nlohmann::json read_json(const fs::path& p) {
  std::ifstream f(p);
  return nlohmann::json::parse(f);
}

WanTransformerConfig config_at(const fs::path& p) {
  std::ifstream f(p);
  return WanTransformerConfig::from_json(io::JsonConfig(nlohmann::json::parse(f), p.string()));
}

const nlohmann::json& expected_file(const std::string& name) {
  static const nlohmann::json j = read_json(kDir / "expected.json");
  return j.at("files").at(name);
}

// Parameter names and shapes equal those of the model Diffusers loaded from the same file.
void expect_diffusers_parameters(const Module& m, const nlohmann::json& want) {
  std::map<std::string, Shape> ours;
  for (const auto& [k, p] : m.named_parameters()) ours[k] = p->shape();
  std::map<std::string, Shape> theirs;
  for (const auto& [k, v] : want.items()) theirs[k] = v.get<std::vector<int64_t>>();
  EXPECT_EQ(ours.size(), theirs.size());
  for (const auto& [k, s] : theirs) {
    auto it = ours.find(k);
    ASSERT_NE(it, ours.end()) << "diffq lacks Diffusers' parameter " << k;
    EXPECT_EQ(it->second, s) << k;
  }
}

const Parameter& param(const Module& m, const std::string& name) {
  for (const auto& [k, p] : m.named_parameters())
    if (k == name) return *p;
  throw std::runtime_error("no parameter " + name);
}

Tensor run(WanTransformer3DModel& m, const io::SafetensorsFile& f, const std::string& p) {
  return m(f.tensor(p + "in.hidden_states"), f.tensor(p + "in.timestep"), f.tensor(p + "in.encoder_hidden_states"));
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

fs::path temp(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / "diffq-wan-single-file";
  fs::create_directories(d);
  return d / name;
}

StateDict comfy_tensors() {
  const auto f = io::SafetensorsFile::open(kComfy);
  StateDict sd;
  for (const auto& [k, v] : f.tensors()) sd[k] = v.clone();
  return sd;
}

void expect_has(const std::string& e, const std::vector<std::string>& parts) {
  for (const auto& p : parts) EXPECT_NE(e.find(p), std::string::npos) << "'" << p << "' not in: " << e;
}

}  // namespace

TEST(WanSingleFile, ComfyNamedSafetensorsMatchesDiffusers) {
  const auto base = config_at(kWan / "t2v/config.json");
  auto m = load_wan_single_file(kComfy, base);
  EXPECT_EQ(m->config.num_layers, 2);
  EXPECT_EQ(m->config.inner_dim(), 32);
  EXPECT_EQ(param(*m, "blocks.1.norm2.weight").dense().dtype(), DType::f16);  // the file's dtype (no opt.dtype)
  expect_diffusers_parameters(*m, expected_file(kComfy.filename().string())["parameters"]);

  LoadOptions f32;
  f32.dtype = DType::f32;
  m = load_wan_single_file(kComfy, base, f32);
  const auto ref = io::SafetensorsFile::open(kDir / "reference.safetensors");
  const Tensor out = run(*m, io::SafetensorsFile::open(kWan / "reference.safetensors"), "t2v_f3.");
  const double e = max_rel(out, ref.tensor("comfy.out"));
  EXPECT_LE(e, kF32Bound);
  std::printf("[wan-single-file] comfy fp16 file vs Diffusers from_single_file: %.3g\n", e);
}

TEST(WanSingleFile, Ti2vSafetensorsMatchesDiffusers) {
  LoadOptions f32;
  f32.dtype = DType::f32;
  auto m = load_wan_single_file(kTi2v, config_at(kWan / "ti2v/config.json"), f32);
  EXPECT_EQ(m->config.in_channels, 48);
  expect_diffusers_parameters(*m, expected_file(kTi2v.filename().string())["parameters"]);
  const auto ref = io::SafetensorsFile::open(kDir / "reference.safetensors");
  const double e = max_rel(run(*m, io::SafetensorsFile::open(kWan / "reference.safetensors"), "ti2v."),
                           ref.tensor("ti2v.out"));
  EXPECT_LE(e, kF32Bound);
  std::printf("[wan-single-file] ti2v bf16 file (per-token timesteps) vs Diffusers: %.3g\n", e);
}

TEST(WanSingleFile, DiffusersNamedSingleFile) {
  const fs::path file = kWan / "t2v/diffusion_pytorch_model.safetensors";
  auto m = load_wan_single_file(file, config_at(kWan / "t2v/config.json"));
  const auto ref = io::SafetensorsFile::open(kWan / "reference.safetensors");
  EXPECT_LE(max_rel(run(*m, ref, "t2v_f3."), ref.tensor("t2v_f3.out")), kF32Bound);
  const auto st = io::SafetensorsFile::open(file);
  EXPECT_EQ(wan_single_file_state_dict(st.tensors()).size(), st.tensors().size());
}

TEST(WanSingleFile, StateDictConversion) {
  const StateDict sd = comfy_tensors();
  const StateDict d = wan_single_file_state_dict(sd);
  EXPECT_EQ(d.size(), sd.size());
  EXPECT_TRUE(d.count("blocks.0.attn1.to_out.0.weight"));
  EXPECT_TRUE(d.count("blocks.1.norm2.bias"));  // the original norm3
  EXPECT_TRUE(d.count("condition_embedder.time_proj.weight"));
  EXPECT_EQ(d.at("scale_shift_table").shape(), (Shape{1, 2, 32}));
  EXPECT_EQ(d.at("blocks.0.scale_shift_table").shape(), (Shape{1, 6, 32}));
  // The head split is not in the weights: Wan's 128 without a base, here 32 / 128 is an error.
  expect_has(error_of([&] { infer_wan_config(sd, std::nullopt, "comfy"); }), {"comfy", "head dim 128"});
  WanTransformerConfig b = config_at(kWan / "t2v/config.json");
  const WanTransformerConfig c = infer_wan_config(sd, b);
  EXPECT_EQ(c.num_attention_heads, 2);
  EXPECT_EQ(c.freq_dim, 32);
  b.num_layers = 3;
  expect_has(error_of([&] { infer_wan_config(sd, b, "x.safetensors"); }),
             {"x.safetensors", "num_layers = 2", "config says 3"});
}

// The real Wan configs (Diffusers' parameter counts fixture lists their kwargs) come back from the
// shapes alone: 1.3B, 14B and TI2V-5B, in both namings.
TEST(WanSingleFile, InfersRealConfigsFromShapes) {
  const auto counts = read_json(kWan / "expected.json").at("parameter_counts");
  for (const char* name : {"wan-1.3b-shape", "wan-14b-shape", "wan2.2-ti2v-5b"}) {
    const auto kw = counts.at(name).at("config");
    WanTransformerConfig want;
    want.num_attention_heads = kw.at("num_attention_heads");
    want.ffn_dim = kw.at("ffn_dim");
    want.num_layers = kw.at("num_layers");
    want.in_channels = kw.value("in_channels", int64_t(16));
    want.out_channels = kw.value("out_channels", int64_t(16));
    const WanTransformer3DModel shapes_only(want);  // no weights are allocated
    WanShapeMap shapes;
    for (const auto& [k, p] : shapes_only.named_parameters()) shapes[k] = p->shape();
    const WanTransformerConfig got = infer_wan_config_from_shapes(shapes, std::nullopt, name);
    EXPECT_EQ(got.num_attention_heads, want.num_attention_heads) << name;
    EXPECT_EQ(got.attention_head_dim, 128) << name;
    EXPECT_EQ(got.ffn_dim, want.ffn_dim) << name;
    EXPECT_EQ(got.num_layers, want.num_layers) << name;
    EXPECT_EQ(got.in_channels, want.in_channels) << name;
    EXPECT_EQ(got.out_channels, want.out_channels) << name;
    EXPECT_EQ(got.text_dim, 4096) << name;
    EXPECT_EQ(got.freq_dim, 256) << name;
    EXPECT_TRUE(got.cross_attn_norm) << name;
  }
}

TEST(WanSingleFile, GGUFMixedTypesMatchesDiffusers) {
  const auto base = config_at(kDir / "gguf/config.json");
  auto m = load_wan_single_file(kGGUF, base);
  expect_diffusers_parameters(*m, expected_file(kGGUF.filename().string())["parameters"]);
  // The parameters Diffusers keeps as GGUFParameters stay quantized here with the file's ggml type,
  // borrowing its bytes (BF16 ones are dense: the exact same values); every other parameter is dense
  // float32 (Diffusers' torch_dtype), including time_embedder's quantized weights, which Diffusers
  // dequantizes at load (_keep_in_fp32_modules).
  const auto gguf_params = expected_file(kGGUF.filename().string())["diffusers_gguf_parameters"];
  int quantized = 0;
  for (const auto& [name, p] : m->named_parameters()) {
    const std::string t = gguf_params.contains(name) ? gguf_params[name].get<std::string>() : "";
    if (t.empty() || t == "BF16") {
      EXPECT_FALSE(p->is_quantized()) << name;
      if (!p->is_quantized()) EXPECT_EQ(p->dense().dtype(), DType::f32) << name;
      continue;
    }
    ASSERT_TRUE(p->is_quantized()) << name;
    std::string scheme = "gguf_" + t;
    std::transform(scheme.begin(), scheme.end(), scheme.begin(), ::tolower);
    EXPECT_EQ(p->quantized().scheme(), scheme) << name;
    const auto& g = dynamic_cast<const quant::GGUFQuantizedWeight&>(p->quantized());
    EXPECT_FALSE(g.data().storage()->owns_allocation()) << name;
    ++quantized;
  }
  EXPECT_EQ(quantized, 17);
  const auto types = expected_file(kGGUF.filename().string())["types"];
  EXPECT_EQ(types["time_embedding.0.weight"], "Q4_K");  // in the file; dense f32 after loading
  EXPECT_FALSE(param(*m, "condition_embedder.time_embedder.linear_1.weight").is_quantized());
  EXPECT_EQ(param(*m, "patch_embedding.weight").shape(), (Shape{32, 16, 1, 2, 2}));  // 5-D in the file

  const auto ref = io::SafetensorsFile::open(kDir / "reference.safetensors");
  const Tensor out = run(*m, ref, "gguf.");
  const double e32 = max_rel(out, ref.tensor("gguf.out_f32_dequant")), ed = max_rel(out, ref.tensor("gguf.out_diffusers"));
  EXPECT_LE(e32, kF32Bound);
  EXPECT_LE(ed, kDiffusersGGUFBound);
  std::printf("[wan-single-file] mixed GGUF: vs Diffusers f32-dequant %.3g, vs Diffusers GGUF %.3g\n", e32, ed);
}

TEST(WanSingleFile, WrongFilesAreClearErrors) {
  const auto base = config_at(kWan / "t2v/config.json");
  // FLUX transformers, safetensors and GGUF.
  for (const fs::path& f : {kRoot / "tests/fixtures/tiny-flux-single-file/flux1-tiny-dev.safetensors",
                            kRoot / "tests/fixtures/tiny-flux-gguf/flux1-tiny-dev-mixed.gguf"})
    expect_has(error_of([&] { load_wan_single_file(f, base); }), {f.filename().string(), "FLUX transformer"});

  // Wan2.1 I2V: an image embedder.
  StateDict sd = comfy_tensors();
  sd["model.diffusion_model.img_emb.proj.0.weight"] = Tensor::zeros({16}, DType::f16);
  sd["model.diffusion_model.blocks.0.cross_attn.k_img.weight"] = Tensor::zeros({32, 32}, DType::f16);
  fs::path p = temp("wan2.1_i2v_480p_tiny.safetensors");
  io::save_safetensors(p, sd);
  expect_has(error_of([&] { load_wan_single_file(p, base); }), {p.string(), "image-to-video", "k_img"});

  // Wan2.2 I2V: 36 input channels (noise + image latent), 16 out.
  sd = comfy_tensors();
  sd["model.diffusion_model.patch_embedding.weight"] = Tensor::zeros({32, 36, 1, 2, 2}, DType::f16);
  p = temp("wan2.2_i2v_tiny.safetensors");
  io::save_safetensors(p, sd);
  expect_has(error_of([&] { load_wan_single_file(p, base); }), {p.string(), "image-to-video", "36 input channels"});

  // VACE.
  sd = comfy_tensors();
  sd["model.diffusion_model.vace_blocks.0.after_proj.bias"] = Tensor::zeros({32}, DType::f16);
  p = temp("wan_vace_tiny.safetensors");
  io::save_safetensors(p, sd);
  expect_has(error_of([&] { load_wan_single_file(p, base); }), {p.string(), "VACE"});

  // An unknown and a missing tensor.
  sd = comfy_tensors();
  sd["model.diffusion_model.blocks.0.self_attn.lora_up.weight"] = Tensor::zeros({4}, DType::f16);
  p = temp("extra.safetensors");
  io::save_safetensors(p, sd);
  expect_has(error_of([&] { load_wan_single_file(p, base); }), {p.string(), "blocks.0.self_attn.lora_up.weight"});
  sd = comfy_tensors();
  sd.erase("model.diffusion_model.blocks.1.ffn.2.bias");
  io::save_safetensors(p, sd);
  expect_has(error_of([&] { load_wan_single_file(p, base); }), {"blocks.1.ffn.net.2.bias"});

  // Another Wan model's file for this folder's config.
  expect_has(error_of([&] { load_wan_single_file(kTi2v, base); }), {kTi2v.string(), "inner dim 24"});
  // Not a model file at all.
  expect_has(error_of([&] { load_wan_single_file(kDir / "expected.json", base); }), {"expected.json", ".gguf"});
  fs::remove(p);
}

TEST(WanSingleFile, TruncatedFilesAreErrors) {
  const auto base = config_at(kWan / "t2v/config.json");
  for (const fs::path& src : {kComfy, kGGUF}) {
    std::ifstream in(src, std::ios::binary);
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const fs::path p = temp("truncated" + src.extension().string());
    std::ofstream(p, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size() * 2 / 3));
    expect_has(error_of([&] { load_wan_single_file(p, base); }), {p.filename().string()});
    fs::remove(p);
  }
}

TEST(WanSingleFile, GGUFOrigShapeModulationWithoutLeadingOneAndI2VTensor) {
  const auto f = io::GGUFFile::open(kGGUF);
  std::vector<io::GGUFWriteTensor> ts;
  for (const auto& t : f.tensors()) {
    Shape s = t.shape;
    if (t.name == "blocks.1.modulation") s = {6, 32};        // as llama.cpp-quantized files store it
    if (t.name == "patch_embedding.weight") s = {32, 64};    // flattened, with ComfyUI's orig_shape below
    ts.push_back({t.name, t.type, s, f.raw_tensor(t.name).clone()});
  }
  std::vector<io::GGUFValue> dims;
  for (int32_t d : {32, 16, 1, 2, 2}) dims.push_back(io::gguf_i32(d));
  const io::GGUFMetadata kv = {{"comfy.gguf.orig_shape.patch_embedding.weight",
                                io::gguf_array(io::GGUFValueType::int32, dims)}};
  const auto base = config_at(kDir / "gguf/config.json");
  const fs::path p = temp("modulation2d.gguf");
  fs::remove(p);
  io::write_gguf(p, kv, ts);
  auto m = load_wan_single_file(p, base);
  const auto ref = io::SafetensorsFile::open(kDir / "reference.safetensors");
  EXPECT_LE(max_rel(run(*m, ref, "gguf."), ref.tensor("gguf.out_f32_dequant")), kF32Bound);

  ts.push_back({"blocks.0.cross_attn.k_img.weight", 0, {32, 32}, Tensor::zeros({32, 32}, DType::f32)});
  fs::remove(p);
  io::write_gguf(p, kv, ts);
  expect_has(error_of([&] { load_wan_single_file(p, base); }), {p.string(), "image-to-video", "k_img"});
  fs::remove(p);
}
