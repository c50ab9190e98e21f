// Single-file FLUX transformers in GGUF (BFL naming), against Diffusers' from_single_file +
// GGUFQuantizationConfig on the same files:
// - tests/fixtures/tiny-flux-gguf/flux1-tiny-dev-mixed.gguf, written by gguf-py (make_flux_gguf.py);
// - the files diffq writes (`diffq quantize --format gguf`), checked by check_flux_gguf.py (gguf-py reader,
//   bytes vs ggml's quantizer, Diffusers' output) whose sha256 must equal what diffq writes now.
// Bounds: vs Diffusers with the f32 (gguf-py) dequantization 1e-4 (the fp32 bound); vs Diffusers' own
// GGUF path 1e-3 (its dequantize functions compute in float16; 1.5e-4 measured on the fixture).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/max_rel.h"
#include "common/sha256.h"
#include "diffq/error.h"
#include "io/diffusers_folder.h"
#include "io/gguf.h"
#include "io/gguf_writer.h"
#include "io/safetensors.h"
#include "models/flux/flux_keys.h"
#include "models/flux/flux_single_file.h"
#include "models/flux/flux_single_file_gguf.h"
#include "quant/gguf/gguf_weight.h"

using namespace diffq;
using namespace diffq::models::flux;
namespace fs = std::filesystem;
using quant::gguf::GGMLType;

namespace {

const fs::path kRoot = DIFFQ_SOURCE_DIR;
const fs::path kDev = kRoot / "tests/fixtures/tiny-flux";
const fs::path kDir = kRoot / "tests/fixtures/tiny-flux-gguf";
const fs::path kMixed = kDir / "flux1-tiny-dev-mixed.gguf";
constexpr double kF32Bound = 1e-4, kDiffusersBound = 1e-3;

using diffq::testing::max_rel;

FluxTransformerConfig base() {
  return FluxTransformerConfig::from_json(io::DiffusersFolder::open(kDev).component("transformer").config);
}

Tensor forward(FluxTransformer2DModel& m) {
  const auto f = io::SafetensorsFile::open(kDev / "reference/transformer_forward.safetensors");
  return m(f.tensor("in.hidden_states"), f.tensor("in.encoder_hidden_states"), f.tensor("in.pooled_projections"),
           f.tensor("in.timestep"), f.tensor("in.guidance"), f.tensor("in.txt_ids"), f.tensor("in.img_ids"), nullptr);
}

const Parameter& param(const Module& m, const std::string& name) {
  for (const auto& [k, p] : m.named_parameters())
    if (k == name) return *p;
  throw std::runtime_error("no parameter " + name);
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
  const fs::path d = fs::temp_directory_path() / "diffq-flux-gguf";
  fs::create_directories(d);
  return d / name;
}

// The fixture's tensors (raw bytes), for rewriting it with one defect.
std::vector<io::GGUFWriteTensor> fixture_tensors() {
  const auto f = io::GGUFFile::open(kMixed);
  std::vector<io::GGUFWriteTensor> out;
  for (const auto& t : f.tensors()) out.push_back({t.name, t.type, t.shape, f.raw_tensor(t.name).clone()});
  return out;
}

}  // namespace

TEST(FluxGGUF, FixtureMatchesDiffusers) {
  auto m = load_flux_single_file(kMixed, base());
  EXPECT_EQ(m->config.num_layers, 2);
  EXPECT_EQ(m->config.num_single_layers, 2);
  EXPECT_TRUE(m->config.guidance_embeds);
  // Split pieces of a fused quantized tensor stay quantized and borrow the file's bytes.
  const Parameter& q = param(*m, "transformer_blocks.0.attn.to_k.weight");  // img_attn.qkv, Q5_1
  ASSERT_TRUE(q.is_quantized());
  EXPECT_EQ(q.quantized().scheme(), "gguf_q5_1");
  const auto& gq = dynamic_cast<const quant::GGUFQuantizedWeight&>(q.quantized());
  EXPECT_FALSE(gq.data().storage()->owns_allocation());
  EXPECT_EQ(param(*m, "single_transformer_blocks.1.proj_mlp.weight").quantized().scheme(), "gguf_q5_1");
  EXPECT_EQ(param(*m, "norm_out.linear.weight").quantized().scheme(), "gguf_q5_0");  // swapped on the bytes
  EXPECT_EQ(param(*m, "time_text_embed.timestep_embedder.linear_1.weight").quantized().scheme(), "gguf_q4_k");
  EXPECT_FALSE(param(*m, "x_embedder.weight").is_quantized());  // F16 in the file, dense f32 here
  EXPECT_EQ(param(*m, "x_embedder.weight").dense().dtype(), DType::f32);

  const auto ref = io::SafetensorsFile::open(kDir / "transformer_forward.safetensors");
  const Tensor out = forward(*m);
  const double e32 = max_rel(out, ref.tensor("out_f32_dequant")), ed = max_rel(out, ref.tensor("out_diffusers"));
  EXPECT_LE(e32, kF32Bound);
  EXPECT_LE(ed, kDiffusersBound);
  std::printf("[flux-gguf] mixed fixture: vs Diffusers f32-dequant %.3g, vs Diffusers GGUF %.3g\n", e32, ed);
}

class FluxGGUFWritten : public ::testing::TestWithParam<const char*> {};

TEST_P(FluxGGUFWritten, IsTheFileDiffusersChecked) {
  const std::string tag = GetParam();
  const auto type = quant::gguf::parse_type(tag);
  ASSERT_TRUE(type.has_value());
  std::ifstream in(kDir / ("written_" + tag + "_check.json"));
  const auto j = nlohmann::json::parse(in);
  ASSERT_TRUE(j["ok"].get<bool>()) << j["errors"].dump();

  LoadOptions lo;
  lo.dtype = DType::f32;
  auto src = FluxTransformer2DModel::from_pretrained(kDev / "transformer", lo);
  const fs::path path = temp("written_" + tag + ".gguf");
  fs::remove(path);
  const auto rep = save_flux_gguf(*src, path, *type, "tiny-flux");
  EXPECT_EQ(rep.tensors, 84);
  ASSERT_EQ(diffq::testing::sha256_file(path), j["sha256"].get<std::string>())
      << "diffq now writes another file than check_flux_gguf.py checked: rerun it (see its docstring)";

  auto m = load_flux_single_file(path, base());
  const auto ref = io::SafetensorsFile::open(kDir / ("written_" + tag + "_forward.safetensors"));
  const Tensor out = forward(*m);
  EXPECT_LE(max_rel(out, ref.tensor("out_f32_dequant")), kF32Bound);
  EXPECT_LE(max_rel(out, ref.tensor("out_diffusers")), kDiffusersBound);

  // Loading splits and writing fuses on the bytes: the loaded file writes back unchanged.
  const fs::path again = temp("again_" + tag + ".gguf");
  fs::remove(again);
  save_flux_gguf(*m, again, *type, "tiny-flux");
  EXPECT_EQ(diffq::testing::sha256_file(again), j["sha256"].get<std::string>());
  fs::remove(path);
  fs::remove(again);
}

INSTANTIATE_TEST_SUITE_P(Types, FluxGGUFWritten, ::testing::Values("q8_0", "q4_k"));

TEST(FluxGGUF, TensorTypeRule) {
  EXPECT_EQ(flux_gguf_tensor_type({3072}, GGMLType::Q4_K), GGMLType::F32);             // 1-D
  EXPECT_EQ(flux_gguf_tensor_type({32, 32}, GGMLType::Q8_0), GGMLType::F32);           // <= 1024 elements
  EXPECT_EQ(flux_gguf_tensor_type({3072, 64}, GGMLType::Q4_K), GGMLType::F16);         // rows not 256-multiples
  EXPECT_EQ(flux_gguf_tensor_type({9216, 3072}, GGMLType::Q4_K), GGMLType::Q4_K);
  EXPECT_EQ(flux_gguf_tensor_type({3072, 64}, GGMLType::Q8_0), GGMLType::Q8_0);
}

TEST(FluxGGUF, TruncatedFileIsAnError) {
  std::ifstream in(kMixed, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const fs::path p = temp("truncated.gguf");
  std::ofstream(p, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size() * 2 / 3));
  const std::string e = error_of([&] { load_flux_single_file(p, base()); });
  EXPECT_NE(e.find("truncated.gguf"), std::string::npos) << e;
  EXPECT_NE(e.find("[gguf]"), std::string::npos) << e;
  fs::remove(p);
}

TEST(FluxGGUF, UnsupportedTypeIsAnError) {
  auto ts = fixture_tensors();
  for (auto& t : ts)
    if (t.name == "double_blocks.1.img_mlp.0.weight") {  // [128, 32] -> Q8_1 (ggml knows it, Diffusers/diffq do not)
      t.type = 9;
      t.data = Tensor::zeros({128 * 40}, DType::u8);
    }
  const fs::path p = temp("q8_1.gguf");
  fs::remove(p);
  io::write_gguf(p, {}, ts);
  const std::string e = error_of([&] { load_flux_single_file(p, base()); });
  EXPECT_NE(e.find("double_blocks.1.img_mlp.0.weight"), std::string::npos) << e;
  EXPECT_NE(e.find("Q8_1"), std::string::npos) << e;
  fs::remove(p);
}

TEST(FluxGGUF, MissingAndUnknownTensorsAreErrors) {
  auto ts = fixture_tensors();
  std::erase_if(ts, [](const io::GGUFWriteTensor& t) { return t.name == "single_blocks.1.linear2.bias"; });
  const fs::path p = temp("missing.gguf");
  fs::remove(p);
  io::write_gguf(p, {}, ts);
  std::string e = error_of([&] { load_flux_single_file(p, base()); });
  EXPECT_NE(e.find("lacks the tensor single_blocks.1.linear2.bias"), std::string::npos) << e;
  fs::remove(p);

  ts = fixture_tensors();
  ts.push_back({"double_blocks.0.img_attn.lora_up.weight", 0, {4}, Tensor::zeros({4}, DType::f32)});
  io::write_gguf(p, {}, ts);
  e = error_of([&] { load_flux_single_file(p, base()); });
  EXPECT_NE(e.find("lora_up"), std::string::npos) << e;
  fs::remove(p);

  ts = fixture_tensors();
  std::erase_if(ts, [](const io::GGUFWriteTensor& t) { return t.name == "double_blocks.0.img_attn.norm.key_norm.scale"; });
  io::write_gguf(p, {}, ts);
  e = error_of([&] { load_flux_single_file(p, base()); });
  EXPECT_NE(e.find("not a BFL/ComfyUI-named FLUX transformer"), std::string::npos) << e;
  fs::remove(p);
}

// A FLUX transformer of inner dim 16 whose final_layer.adaLN_modulation.1.bias (32 values: shift, scale)
// is one Q8_0 block: swapping its halves would cut the block at 16.
TEST(FluxGGUF, SplitInsideABlockIsAnError) {
  FluxTransformerConfig cfg;
  cfg.num_layers = 1;
  cfg.num_single_layers = 1;
  cfg.num_attention_heads = 1;
  cfg.attention_head_dim = 16;
  cfg.axes_dims_rope = {4, 6, 6};
  cfg.in_channels = 16;
  cfg.joint_attention_dim = 8;
  cfg.pooled_projection_dim = 8;
  cfg.guidance_embeds = false;
  FluxTransformer2DModel shapes(cfg);
  std::vector<io::GGUFWriteTensor> ts;
  for (const BflTensorMap& m : bfl_flux_tensor_map(cfg)) {
    Shape s = param(shapes, m.parts[0].first).shape();
    for (size_t i = 1; i < m.parts.size(); ++i) s[0] += param(shapes, m.parts[i].first).shape()[0];
    if (m.bfl == "final_layer.adaLN_modulation.1.bias") {
      ASSERT_EQ(s, (Shape{32}));
      ts.push_back({m.bfl, uint32_t(GGMLType::Q8_0), s, Tensor::zeros({34}, DType::u8)});
    } else {
      ts.push_back({m.bfl, 0, s, Tensor::zeros(s, DType::f32)});
    }
  }
  const fs::path p = temp("inside_block.gguf");
  fs::remove(p);
  io::write_gguf(p, {}, ts);
  FluxTransformerConfig b;
  b.axes_dims_rope = {4, 6, 6};
  const std::string e = error_of([&] { load_flux_single_file(p, b); });
  EXPECT_NE(e.find("final_layer.adaLN_modulation.1.bias"), std::string::npos) << e;
  EXPECT_NE(e.find("block-row boundary"), std::string::npos) << e;
  fs::remove(p);
}
