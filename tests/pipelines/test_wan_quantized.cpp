// WanPipeline with quantization against Diffusers running the same on the CPU (tests/fixtures/wan-quantized, made
// by tools/reference/make_wan_quantized.py): quantize-at-load (bitsandbytes nf4 on transformer + text encoder,
// torchao int8dq / fp8wo on the transformer), Diffusers' pre-quantized folders (save_pretrained) loaded with no
// flags, city96-style GGUF transformers (WanPipelineLoadOptions::transformer_file), and the seeds' video recipe:
// nf4 + leaf-level group offload with prefetch on every component + regional compilation, together.
// Bounds per scheme are test_flux_quantized.cpp's (same dequantized weights as the library, so float32
// accumulation order remains; int8dq's activation codes flip under 1-ulp changes, see there).
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "diffq/error.h"
#include "diffq/memory.h"
#include "io/safetensors.h"
#include "modules/quantize_on_load.h"
#include "offload/offload_spec.h"
#include "pipelines/pipeline_test_util.h"
#include "pipelines/wan_pipeline.h"

namespace diffq {
namespace {

using diffq::testing::rel_err;
const std::filesystem::path kFix = "tests/fixtures/wan-quantized";

const nlohmann::json& cases() {
  static const nlohmann::json j = [] {
    std::ifstream in(kFix / "cases.json");
    return nlohmann::json::parse(in);
  }();
  return j;
}
const io::SafetensorsFile& reference() {
  static const auto f = io::SafetensorsFile::open(kFix / "latents.safetensors");
  return f;
}

WanCallOptions call_options(const std::string& output_type = "latent") {
  const auto& c = cases().at("call");
  WanCallOptions o;
  o.prompt = {c.at("prompt").get<std::string>()};
  o.height = c.at("height");
  o.width = c.at("width");
  o.num_frames = c.at("num_frames");
  o.num_inference_steps = c.at("num_inference_steps");
  o.guidance_scale = c.at("guidance_scale");
  o.seed = c.at("seed");
  o.max_sequence_length = c.at("max_sequence_length");
  o.output_type = output_type;
  return o;
}

// `--quant <scheme> --quantize <components>` as the CLI builds it.
PipelineQuantizationConfig quant_config(const std::string& scheme, const std::vector<std::string>& components) {
  const auto [backend, kwargs] = quant::quant_shorthand(scheme, "float32");
  return PipelineQuantizationConfig(backend, kwargs, components, std::nullopt);
}

std::unique_ptr<WanPipeline> load(const std::string& folder, const WanPipelineLoadOptions& lo = {}) {
  return WanPipeline::from_pretrained(kFix / folder, DType::f32, lo);
}

// The names of the Linear modules of `m` whose weight is quantized.
std::set<std::string> quantized_linears(const Module& m) {
  std::set<std::string> out;
  for (const auto& [name, mod] : m.named_modules())
    if (mod->type_name() == "Linear")
      for (const auto& [pn, p] : mod->own_parameters())
        if (pn == "weight" && p->defined() && p->is_quantized()) out.insert(name);
  return out;
}
std::set<std::string> as_set(const nlohmann::json& j) {
  const auto v = j.get<std::vector<std::string>>();
  return {v.begin(), v.end()};
}

struct Case {
  const char* name;       // the test's name
  const char* reference;  // the key of latents.safetensors
  double bound;           // max relative error of the final latents
};

void expect_close(const Case& c, const WanPipeline& pipe, const Tensor& latents) {
  const double e = rel_err(latents, reference().tensor(c.reference));
  const double e_none = rel_err(latents, reference().tensor("none"));
  std::string q;
  for (const auto& [k, v] : pipe.quantization) q += k + ": " + v + "; ";
  std::printf("[%s] vs Diffusers %s: %.3g (vs unquantized %.3g) [%s]\n", c.name, c.reference, e, e_none, q.c_str());
  EXPECT_LE(e, c.bound) << c.name;
  EXPECT_GT(e_none, 1e-4) << c.name << ": quantization changed nothing";
}

// ---------------------------------------------------------------- quantize at load

TEST(WanQuantized, Nf4OnTransformerAndTextEncoderMatchesDiffusers) {
  WanPipelineLoadOptions lo;
  lo.quantization_config = quant_config("nf4", {"transformer", "text_encoder"});
  auto pipe = load("pipeline", lo);
  ASSERT_EQ(pipe->quantization.count("transformer"), 1u);
  ASSERT_EQ(pipe->quantization.count("text_encoder"), 1u);
  EXPECT_EQ(pipe->quantization.count("vae"), 0u);
  // The same Linear layers quantized as Diffusers' / transformers' Linear4bit: the time embedder
  // (_keep_in_fp32_modules) stays dense in the transformer, UMT5's "wo" (transformers' _keep_in_fp32_modules,
  // which its bitsandbytes quantizer never converts) in the text encoder.
  const auto& l4 = cases().at("schemes").at("nf4").at("linear4bit");
  EXPECT_EQ(quantized_linears(*pipe->transformer), as_set(l4.at("transformer")));
  EXPECT_EQ(quantized_linears(*pipe->text_encoder), as_set(l4.at("text_encoder")));
  for (const auto& [name, p] : pipe->transformer->named_parameters())
    if (name.find("time_embedder") != std::string::npos || name.find("scale_shift_table") != std::string::npos ||
        name.find("norm2") != std::string::npos) {
      EXPECT_FALSE(p->is_quantized()) << name;
      EXPECT_EQ(p->dtype(), DType::f32) << name;
    }
  // Measured (2026-12-02): 6.7e-7 (1.7e-2 before UMT5's "wo" was kept dense; bound as FLUX's nf4).
  expect_close({"nf4", "nf4", 1e-6}, *pipe, (*pipe)(call_options()).latents);
}

// Diffusers' quantizers skip _keep_in_fp32_modules whatever torch_dtype is; a load without a dtype must too.
TEST(WanQuantized, KeepInFp32ModulesStayDenseWithoutADtype) {
  WanPipelineLoadOptions lo;
  lo.load_text_encoder = false;
  lo.quantization_config = quant_config("nf4", {"transformer"});
  auto pipe = WanPipeline::from_pretrained(kFix / "pipeline", std::nullopt, lo);
  const auto q = quantized_linears(*pipe->transformer);
  EXPECT_EQ(q, as_set(cases().at("schemes").at("nf4").at("linear4bit").at("transformer")));
  for (const auto& [name, p] : pipe->transformer->named_parameters())
    if (name.find("time_embedder") != std::string::npos) {
      EXPECT_FALSE(p->is_quantized()) << name;
      EXPECT_EQ(p->dtype(), DType::f32) << name;
    }
}

class WanQuantizedTransformer : public ::testing::TestWithParam<Case> {};

TEST_P(WanQuantizedTransformer, FinalLatentsCloseToDiffusers) {
  const Case c = GetParam();
  WanPipelineLoadOptions lo;
  lo.quantization_config = quant_config(c.name, {"transformer"});
  auto pipe = load("pipeline", lo);
  ASSERT_EQ(pipe->quantization.count("transformer"), 1u);
  EXPECT_EQ(pipe->quantization.count("text_encoder"), 0u);
  EXPECT_GT(summarize_quantization(*pipe->transformer).quantized, 0);
  EXPECT_EQ(quantized_linears(*pipe->transformer).count("condition_embedder.time_embedder.linear_1"), 0u);
  expect_close(c, *pipe, (*pipe)(call_options()).latents);
}

INSTANTIATE_TEST_SUITE_P(
    Schemes, WanQuantizedTransformer,
    // Measured (2026-12-02): fp8wo 6.2e-7; bound as FLUX's.
    ::testing::Values(Case{"fp8wo", "fp8wo", 1e-6}), [](const auto& info) { return std::string(info.param.name); });

// int8dq: torchao quantizes the activations per token at run time, and a code flips under a 1-ulp difference of an
// activation; CFG 5 on this tiny model amplifies a flip, so Diffusers moves against ITSELF by up to ~1e-2 when one
// noise element is nudged by 1 ulp (cases.json schemes.int8dq.self_sensitivity, measured by make_wan_quantized.py),
// about as far as from the unquantized pipeline. So the call without CFG is compared with FLUX's int8dq bound,
// and the CFG call within twice the library's own sensitivity. Measured (2026-12-02): no CFG 1.4e-3 (3.6e-3 from
// the unquantized pipeline); CFG 5: 1.8e-2 (Diffusers' own sensitivity 1.65e-2).
TEST(WanQuantized, Int8dqMatchesDiffusersWithinItsOwnSensitivity) {
  WanPipelineLoadOptions lo;
  lo.quantization_config = quant_config("int8dq", {"transformer"});
  auto pipe = load("pipeline", lo);
  ASSERT_EQ(pipe->quantization.count("transformer"), 1u);
  EXPECT_EQ(quantized_linears(*pipe->transformer).count("condition_embedder.time_embedder.linear_1"), 0u);
  WanCallOptions nocfg = call_options();
  nocfg.guidance_scale = 1.0;
  const Tensor l1 = (*pipe)(nocfg).latents;
  const double e1 = rel_err(l1, reference().tensor("int8dq_nocfg"));
  const double e1_none = rel_err(l1, reference().tensor("none_nocfg"));
  const auto& sens = cases().at("schemes").at("int8dq").at("self_sensitivity");
  const Tensor l2 = (*pipe)(call_options()).latents;
  const double e2 = rel_err(l2, reference().tensor("int8dq"));
  std::printf("[int8dq] no CFG vs Diffusers %.3g (vs unquantized %.3g); CFG 5: %.3g (Diffusers' own 1-ulp "
              "sensitivity %.3g)\n",
              e1, e1_none, e2, sens.at("steps_2").get<double>());
  EXPECT_LE(e1, 5e-3);
  EXPECT_GT(e1_none, 2 * e1);  // the comparison sees the quantization
  EXPECT_LE(e2, 2 * sens.at("steps_2").get<double>());
}

// ---------------------------------------------------------------- pre-quantized folders, no flags

class WanPrequantized : public ::testing::TestWithParam<Case> {};

TEST_P(WanPrequantized, LoadsPackedAndMatchesDiffusersOnTheSavedFolder) {
  const Case c = GetParam();
  auto pipe = load(c.name);
  ASSERT_EQ(pipe->quantization.count("transformer"), 1u) << c.name;
  EXPECT_EQ(pipe->quantization.count("text_encoder"), 0u);
  EXPECT_GT(summarize_quantization(*pipe->transformer).quantized, 0);
  EXPECT_EQ(quantized_linears(*pipe->transformer).count("condition_embedder.time_embedder.linear_2"), 0u);
  expect_close(c, *pipe, (*pipe)(call_options()).latents);
}

INSTANTIATE_TEST_SUITE_P(
    Folders, WanPrequantized,
    // Measured (2026-12-02): 6.6e-7 (nf4), 6.2e-7 (fp8wo); bound as FLUX's.
    ::testing::Values(Case{"prequant-nf4", "prequant_nf4", 1e-6}, Case{"prequant-fp8wo", "prequant_fp8wo", 1e-6}),
    [](const auto& info) {
      std::string n = info.param.name;
      for (char& ch : n)
        if (ch == '-') ch = '_';
      return n;
    });

// ---------------------------------------------------------------- city96-style GGUF transformers

class WanGguf : public ::testing::TestWithParam<Case> {};

TEST_P(WanGguf, SingleFileTransformerMatchesDiffusersFromSingleFile) {
  const Case c = GetParam();
  const auto& info = cases().at("schemes").at(std::string("gguf_") + c.name);
  WanPipelineLoadOptions lo;
  lo.transformer_file = kFix / info.at("file").get<std::string>();
  auto pipe = load("pipeline", lo);
  ASSERT_EQ(pipe->quantization.count("transformer"), 1u);
  // Quantized exactly where Diffusers keeps GGUFParameters (the time embedder's quantized weight is
  // dequantized to float32 at load, as Diffusers does for _keep_in_fp32_modules).
  std::set<std::string> want;
  for (const auto& k : info.at("diffusers_gguf_parameters")) {
    const std::string s = k.get<std::string>();
    want.insert(s.substr(0, s.rfind('.')));
  }
  EXPECT_EQ(quantized_linears(*pipe->transformer), want);
  const std::string label = pipe->quantization.at("transformer");
  EXPECT_NE(label.find("gguf_q4_k"), std::string::npos) << label;
  EXPECT_NE(label.find("gguf_q8_0"), std::string::npos) << label;
  const Tensor latents = (*pipe)(call_options()).latents;
  // Reference: Diffusers with gguf-py's float32 dequantization (what diffq computes); Diffusers' own float16
  // dequantize functions are printed for information.
  const double e16 = rel_err(latents, reference().tensor(std::string("gguf_") + c.name));
  std::printf("[gguf %s] vs Diffusers' own fp16 dequantization: %.3g\n", c.name, e16);
  expect_close(c, *pipe, latents);
}

INSTANTIATE_TEST_SUITE_P(
    Types, WanGguf,
    // One city96-style file: Q4_K on ffn.2 (256-wide rows), Q8_0 on every other Linear. Measured (2026-12-02):
    // 5.3e-7 (1.0e-4 against Diffusers' own float16 dequantization); bound as FLUX's GGUF cases.
    ::testing::Values(Case{"q4_k", "gguf_q4_k_f32", 1e-6}),
    [](const auto& info) { return std::string(info.param.name); });

// ---------------------------------------------------------------- the recipe

struct RecipeRun {
  Tensor latents, frames;
  int64_t peak = 0;  // allocator peak during the call, above what was allocated before loading
};

RecipeRun run_nf4(bool offload_and_compile, const std::filesystem::path& disk) {
  const int64_t before = memory_stats(Device::cpu()).current_bytes;
  RecipeRun r;
  {
    WanPipelineLoadOptions lo;
    lo.quantization_config = quant_config("nf4", {"transformer", "text_encoder"});
    auto pipe = load("pipeline", lo);
    if (offload_and_compile) {
      offload::OffloadSpec spec = offload::parse_offload_spec("leaf");
      EXPECT_TRUE(spec.prefetch);
      spec.disk_path = disk;
      offload::apply(pipe->offloader, pipe->offload_components(), WanPipeline::model_cpu_offload_seq, spec);
      pipe->transformer->compile_repeated_blocks(compile::CompileOptions{});
      EXPECT_FALSE(pipe->transformer->compiled_modules().empty());
    }
    reset_peak_memory_stats(Device::cpu());
    WanOutput out = (*pipe)(call_options("np"));
    r.peak = memory_stats(Device::cpu()).peak_bytes - before;
    r.latents = out.latents;
    r.frames = out.frames_f32;
  }
  return r;
}

TEST(WanQuantizedRecipe, Nf4WithLeafOffloadAndRegionalCompileEqualsNf4AloneWithLowerPeak) {
  const auto disk = std::filesystem::temp_directory_path() / ("diffq-wanquant-" + std::to_string(::getpid()));
  const RecipeRun plain = run_nf4(false, disk);
  const RecipeRun recipe = run_nf4(true, disk);
  std::filesystem::remove_all(disk);
  const double d = rel_err(recipe.latents, plain.latents);
  const double e = rel_err(recipe.latents, reference().tensor("nf4"));
  const auto ref_frames = io::SafetensorsFile::open(kFix / "frames.safetensors").tensor("nf4");
  ASSERT_EQ(recipe.frames.shape(), ref_frames.shape());
  const double ef = rel_err(recipe.frames, ref_frames);
  std::printf("[recipe] vs nf4 alone %.3g, vs Diffusers nf4 latents %.3g, frames %.3g; allocator peak %.1f KiB "
              "(nf4 alone %.1f KiB)\n",
              d, e, ef, recipe.peak / 1024.0, plain.peak / 1024.0);
  // Measured (2026-12-02): the recipe's latents are bit-identical to nf4 alone (0), 6.7e-7 from Diffusers' nf4
  // latents, frames 2.0e-6 from Diffusers'; allocator peak of the call 2044 KiB vs 2574 KiB without offloading.
  EXPECT_LE(d, 1e-6);
  EXPECT_LE(e, 1e-6);
  EXPECT_LE(ef, 1e-5);
  EXPECT_LT(recipe.peak, plain.peak);
}

}  // namespace
}  // namespace diffq
