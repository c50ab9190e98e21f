// BFL fp8r / nvfp4 single-file FLUX transformers (tests/fixtures/quant-bfl-modelopt/flux-tiny-bfl.safetensors,
// quantized by Diffusers' own BFL helpers) against Diffusers' from_single_file(..., BFLQuantizationConfig(
// compute_dtype=float32)) on the CPU: its dequantization of layers that went through its key conversion (qkv
// split, single-block linear1 split, final_layer's swapped halves) bit for bit, the tiny pipeline's final latents
// within float32 accumulation error, and the errors for malformed / mixed files.
#include <gtest/gtest.h>

#include <cstdio>

#include "bfl_modelopt_test_util.h"
#include "io/diffusers_folder.h"
#include "io/inspect.h"
#include "io/safetensors.h"
#include "models/flux/flux_single_file.h"
#include "modules/quantize_on_load.h"
#include "pipelines/pipeline_test_util.h"
#include "quant/bfl/bfl_layers.h"
#include "quant/bfl/fp8_scaled_weight.h"
#include "quant/bfl/nvfp4_weight.h"

namespace {

using namespace diffq;
using namespace diffq::testing::bflmo;
namespace fs = std::filesystem;

const fs::path kFile = kFix / "flux-tiny-bfl.safetensors";

models::flux::FluxTransformerConfig base() {
  return models::flux::FluxTransformerConfig::from_json(io::DiffusersFolder::open(kTinyFlux).component("transformer").config);
}

TEST(BflSingleFile, DequantizedWeightsEqualDiffusersBitForBit) {
  auto m = models::flux::load_flux_single_file(kFile, base());
  const auto ref = io::SafetensorsFile::open(kFix / "bfl_reference.safetensors");
  const auto& layers = cases().at("bfl").at("layers");
  ASSERT_EQ(layers.size(), 4u);
  for (const auto& [name, cls] : layers.items()) {
    const Parameter& p = param(*m, name + ".weight");
    ASSERT_TRUE(p.is_quantized()) << name;
    EXPECT_EQ(p.quantized().scheme(), cls == "BFLNVFP4Linear" ? "bfl_nvfp4" : "bfl_fp8r") << name;
    const Tensor d = p.quantized().dequantize(DType::f32);
    EXPECT_EQ(bit_mismatches(d, ref.tensor("deq." + name)), 0) << name;
  }
  const QuantizationSummary s = summarize_quantization(*m);
  EXPECT_EQ(s.dense_linear, 0);  // every Linear of the file is fp8r or nvfp4
  EXPECT_GT(s.quantized, 30);
}

TEST(BflSingleFile, PipelineMatchesDiffusersFp32) {
  FluxPipelineLoadOptions lo;
  lo.transformer_file = kFile;
  auto pipe = FluxPipeline::from_pretrained(kTinyFlux, DType::f32, lo);
  const Tensor lat = (*pipe)(call_options()).latents;
  const auto ref = io::SafetensorsFile::open(kFix / "bfl_reference.safetensors");
  const double e = diffq::testing::rel_err(lat, ref.tensor("latents"));
  std::printf("[bfl fp8r+nvfp4] final latents vs Diffusers: %.3g\n", e);
  EXPECT_LE(e, 1e-4);
}

// The fixture rewritten with one defect; the error must name the key.
std::string load_error(const std::function<void(StateDict&)>& defect, const std::string& name) {
  const auto f = io::SafetensorsFile::open(kFile);
  StateDict sd;
  for (const auto& [k, v] : f.tensors()) sd[k] = v.clone();
  defect(sd);
  const fs::path p = fs::temp_directory_path() / "diffq-bfl-test";
  fs::create_directories(p);
  io::save_safetensors(p / name, sd);
  return error_of([&] { models::flux::load_flux_single_file(p / name, base()); });
}

const std::string kQkv = "model.diffusion_model.double_blocks.0.img_attn.qkv";   // nvfp4
const std::string kLin1 = "model.diffusion_model.single_blocks.0.linear1";       // fp8r

TEST(BflSingleFile, MalformedAndMixedFilesAreClearErrors) {
  std::string e = load_error([](StateDict& sd) { sd.erase(kQkv + ".input_scale"); }, "no_input_scale.safetensors");
  EXPECT_NE(e.find(kQkv), std::string::npos) << e;
  EXPECT_NE(e.find("input_scale"), std::string::npos) << e;
  // fp8 codes without their scale in a file whose other layers are quantized.
  e = load_error([](StateDict& sd) { sd.erase(kLin1 + ".weight_scale"); }, "mixed.safetensors");
  EXPECT_NE(e.find(kLin1 + ".weight"), std::string::npos) << e;
  EXPECT_NE(e.find("mixed"), std::string::npos) << e;
  // nvfp4's weight_scale_2 alone (its weight_scale gone).
  e = load_error([](StateDict& sd) { sd.erase(kQkv + ".weight_scale"); }, "orphan.safetensors");
  EXPECT_NE(e.find(kQkv + "."), std::string::npos) << e;
  EXPECT_NE(e.find("belongs to no quantized layer"), std::string::npos) << e;
  // a layout whose weight dtype does not match (fp8r scale on nvfp4's packed bytes).
  e = load_error([](StateDict& sd) { sd.erase(kQkv + ".weight_scale_2"); sd.erase(kQkv + ".input_scale"); },
                 "dtype.safetensors");
  EXPECT_NE(e.find(kQkv + ".weight is uint8"), std::string::npos) << e;
  // a block scale of the wrong shape.
  e = load_error([](StateDict& sd) { sd[kQkv + ".weight_scale"] = sd[kQkv + ".weight_scale"].slice(1, 0, 1).contiguous(); },
                 "shape.safetensors");
  EXPECT_NE(e.find(kQkv + ".weight"), std::string::npos) << e;
  EXPECT_NE(e.find("weight_scale must be float8_e4m3fn"), std::string::npos) << e;
}

TEST(BflSingleFile, InspectNamesTheSchemes) {
  const auto j = io::inspect_json(kFile);
  ASSERT_TRUE(j.contains("quantization")) << j.dump();
  EXPECT_GT(j["quantization"]["fp8r_layers"].get<int64_t>(), 0);
  EXPECT_GT(j["quantization"]["nvfp4_layers"].get<int64_t>(), 0);
  const std::string text = io::inspect_text(j);
  EXPECT_NE(text.find("quantization: BFL fp8r ("), std::string::npos) << text;
  // ModelOpt: the folder's config names the algorithm and, for MIXED_PRECISION, the layers per algorithm.
  const auto mo = io::inspect_json(kFix / "modelopt-mixed");
  const std::string mt = io::inspect_text(mo);
  EXPECT_NE(mt.find("quantization: modelopt MIXED_PRECISION (FP8 x8, FP8_PER_CHANNEL_PER_TOKEN x8, NVFP4 x1, "
                    "W4A16_AWQ x"),
            std::string::npos)
      << mt;
}

TEST(BflSingleFile, ScalarReferenceDequantization) {
  // nvfp4: codes 0x21 -> (1: 0.5, 2: 1.0); block scale fp8 0x38 (1.0) * weight_scale_2 (2.0).
  std::vector<float> ws2{2.0f};
  Tensor packed = Tensor::zeros({1, 8}, DType::u8);
  static_cast<uint8_t*>(packed.data_ptr())[0] = 0x21;
  static_cast<uint8_t*>(packed.data_ptr())[7] = 0xF9;  // elements 14, 15: -0.5, -6
  Tensor bs = Tensor::zeros({1, 1}, DType::f8_e4m3fn);
  static_cast<uint8_t*>(bs.data_ptr())[0] = 0x38;
  quant::Nvfp4Weight w(packed, bs, Tensor::from_vector(ws2, {}), "bfl_nvfp4", "test");
  const auto d = w.dequantize(DType::f32).to_f32_vector();
  ASSERT_EQ(d.size(), 16u);
  EXPECT_EQ(d[0], 1.0f);
  EXPECT_EQ(d[1], 2.0f);
  EXPECT_EQ(d[14], -1.0f);
  EXPECT_EQ(d[15], -12.0f);
  // fp8r: one scale per row.
  Tensor q = Tensor::from_vector({1.0f, -2.0f, 0.5f, 448.0f}, {2, 2}, DType::f8_e4m3fn);
  quant::Fp8ScaledWeight f(q, Tensor::from_vector({0.5f, 3.0f}, {2}), "bfl_fp8r", "test");
  const auto fd = f.dequantize(DType::f32).to_f32_vector();
  EXPECT_EQ(fd, (std::vector<float>{0.5f, -1.0f, 1.5f, 1344.0f}));
}

}  // namespace
