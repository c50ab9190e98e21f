// LoRA adapters on the tiny FLUX pipeline against Diffusers + PEFT (tests/fixtures/lora, made by
// tools/reference/make_lora_fixtures.py): each format loaded alone, two adapters with weights, fused, the
// fused/unfused round trip, kohya's conversion key by key, errors for unknown keys and unsupported formats,
// a hotswap on a compiled transformer, and group offloading.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/error_of.h"
#include "compile/compile_options.h"
#include "diffq/error.h"
#include "io/safetensors.h"
#include "lora/lora_file.h"
#include "lora/lora_manager.h"
#include "pipelines/flux_pipeline.h"
#include "pipelines/pipeline_test_util.h"
#include "quant/quant_method.h"
#include "common/flux_latent_call.h"

namespace {

using diffq::Tensor;
using diffq::testing::rel_err;
namespace lora = diffq::lora;

const std::string kFix = DIFFQ_SOURCE_DIR "/tests/fixtures/";
const std::string kLora = kFix + "lora/";

const nlohmann::json& cases() {
  static const nlohmann::json j = [] {
    std::ifstream in(kLora + "cases.json");
    return nlohmann::json::parse(in);
  }();
  return j;
}
const diffq::io::SafetensorsFile& ref() {
  static const auto f = diffq::io::SafetensorsFile::open(kLora + "latents.safetensors");
  return f;
}

std::unique_ptr<diffq::FluxPipeline> tiny(const std::string& quant = "") {
  diffq::FluxPipelineLoadOptions lo;
  if (!quant.empty()) {
    const auto [backend, kwargs] = diffq::quant::quant_shorthand(quant, "float32");
    lo.quantization_config = diffq::PipelineQuantizationConfig(backend, kwargs, {"transformer"}, std::nullopt);
  }
  return diffq::FluxPipeline::from_pretrained(kFix + "tiny-flux", diffq::DType::f32, lo);
}

lora::LoraModelInfo info_of(const diffq::FluxPipeline& p) {
  const auto& c = p.transformer->config;
  const int64_t inner = c.num_attention_heads * c.attention_head_dim;
  return {{inner, inner, inner, inner * 4}};
}

lora::LoraManager manager(diffq::FluxPipeline& p) {
  return lora::LoraManager({{"transformer", p.transformer.get()}, {"text_encoder", p.text_encoder.get()}}, info_of(p));
}

Tensor run(diffq::FluxPipeline& p) {
  const auto& call = cases().at("call");
  auto o = diffq::testing::flux_latent_call(call);
  return p(o).latents;
}

// fp32 against Diffusers + PEFT: max |d| / max |ref| <= 1e-4.
constexpr double kTol = 1e-4;

class LoraFormats : public ::testing::TestWithParam<std::pair<const char*, const char*>> {};

TEST_P(LoraFormats, OutputMatchesDiffusers) {
  const auto [file, key] = GetParam();
  auto p = tiny();
  auto m = manager(*p);
  m.load(kLora + file + ".safetensors", file);
  const double e = rel_err(run(*p), ref().tensor(key));
  const double moved = rel_err(ref().tensor(key), ref().tensor("none"));
  std::printf("[%s] vs Diffusers (%s): %.3g (the adapter moves the output by %.3g)\n", file, key, e, moved);
  EXPECT_LE(e, kTol);
  EXPECT_GT(moved, 1e-2);
}

// kohya: compared with "kohya_all" (Diffusers given the keys its own kohya conversion leaves unprefixed; it drops
// them otherwise, see KohyaKeysDiffusersDrops).
INSTANTIATE_TEST_SUITE_P(Formats, LoraFormats,
                         ::testing::Values(std::make_pair("peft_a", "peft_a"), std::make_pair("peft_b_alpha", "peft_b_alpha"),
                                           std::make_pair("kohya", "kohya_all"), std::make_pair("comfy", "comfy"),
                                           std::make_pair("xlabs", "xlabs")),
                         [](const auto& i) { return std::string(i.param.first); });

TEST(Lora, NoAdapterIsTheBasePipeline) {
  auto p = tiny();
  EXPECT_LE(rel_err(run(*p), ref().tensor("none")), kTol);
}

TEST(Lora, TwoAdaptersWithWeightsThenFusedThenUnfused) {
  auto p = tiny();
  auto m = manager(*p);
  m.load(kLora + "peft_a.safetensors", "a");
  m.load(kLora + "peft_b_alpha.safetensors", "b");
  const auto& two = cases().at("two");
  m.set_adapters(two.at("names").get<std::vector<std::string>>(), two.at("weights").get<std::vector<double>>());
  const Tensor unfused = run(*p);
  EXPECT_LE(rel_err(unfused, ref().tensor("two")), kTol);

  auto* q = p->transformer->find_module("transformer_blocks.0.attn.to_q");
  auto& lin = dynamic_cast<diffq::Linear&>(*q);
  const Tensor w0 = lin.weight.dense();
  const std::vector<float> bits0 = w0.to_f32_vector();
  const auto left = m.fuse(cases().at("fuse_scale").get<double>());
  EXPECT_TRUE(left.empty());
  EXPECT_NE(lin.weight.dense().storage(), w0.storage());
  EXPECT_LE(rel_err(run(*p), ref().tensor("fused")), kTol);

  m.unfuse();  // the original tensor itself comes back: same storage (the mmap view), same bits
  EXPECT_EQ(lin.weight.dense().storage(), w0.storage());
  EXPECT_EQ(lin.weight.dense().to_f32_vector(), bits0);
  EXPECT_EQ(rel_err(run(*p), unfused), 0.0);
}

TEST(Lora, KohyaConvertedKeyByKeyAsDiffusers) {
  auto p = tiny();
  const auto conv = lora::read_lora_file(kLora + "kohya.safetensors", info_of(*p));
  EXPECT_EQ(conv.format, lora::LoraFormat::kohya);
  const auto want = diffq::io::SafetensorsFile::open(kLora + "kohya_converted.safetensors");
  std::set<std::string> ours, theirs;
  for (const auto& [k, v] : conv.tensors) ours.insert(k);
  for (const auto& n : want.names()) theirs.insert(n);
  EXPECT_EQ(ours, theirs);
  for (const auto& n : want.names()) {
    if (!conv.tensors.count(n)) continue;
    const Tensor a = conv.tensors.at(n), b = want.tensor(n);
    ASSERT_EQ(a.shape(), b.shape()) << n;
    EXPECT_EQ(a.to_f32_vector(), b.to_f32_vector()) << n;  // bit for bit
  }
}

TEST(Lora, KohyaKeysDiffusersDropsAreAppliedAndSaid) {
  // Diffusers' own output for the file ("kohya") lacks img_in/txt_in/... (unprefixed, dropped): diffq differs on
  // purpose and warns.
  auto p = tiny();
  auto m = manager(*p);
  m.load(kLora + "kohya.safetensors", "k");
  ASSERT_FALSE(m.warnings().empty());
  EXPECT_NE(m.warnings()[0].find("x_embedder"), std::string::npos);
  EXPECT_GT(rel_err(run(*p), ref().tensor("kohya")), 1e-3);
}

TEST(Lora, UnknownKeysAreAnErrorListingThemOrAWarningWhenLenient) {
  auto p = tiny();
  auto m = manager(*p);
  const std::string e = diffq::testing::error_of([&] { m.load(kLora + "unknown.safetensors", "u"); });
  EXPECT_NE(e.find("transformer.transformer_blocks.0.attn.to_zz.lora_A.weight"), std::string::npos) << e;
  EXPECT_NE(e.find("--lora-lenient"), std::string::npos) << e;
  EXPECT_TRUE(m.adapters().empty());
  m.load(kLora + "unknown.safetensors", "u", 1.0, {.lenient = true});
  ASSERT_EQ(m.warnings().size(), 1u);
  EXPECT_NE(m.warnings()[0].find("to_zz"), std::string::npos);
}

TEST(Lora, LokrIsRefusedNamingWhy) {
  auto p = tiny();
  auto m = manager(*p);
  const std::string e = diffq::testing::error_of([&] { m.load(kLora + "lokr.safetensors"); });
  EXPECT_NE(e.find("LoKr"), std::string::npos) << e;
  EXPECT_NE(e.find("lokr_w1"), std::string::npos) << e;
}

TEST(Lora, HotswapOnACompiledTransformerEqualsEager) {
  auto p = tiny();
  auto m = manager(*p);
  m.load(kLora + "peft_a.safetensors", "x");
  m.load(kLora + "peft_b_alpha.safetensors", "y");  // every layer either touches gets its slot before compiling
  m.set_adapters({"x"});
  p->transformer->compile(diffq::compile::CompileOptions{});
  m.mark_compiled();
  EXPECT_LE(rel_err(run(*p), ref().tensor("peft_a")), kTol);
  // Swap adapter x's weights for peft_b_alpha's (no recompile: the graph reads the adapters at run time).
  m.unload("y");
  m.load(kLora + "peft_b_alpha.safetensors", "x", 1.0, {.hotswap = true});
  const auto graphs_before = p->transformer->compiled_modules().size();
  EXPECT_LE(rel_err(run(*p), ref().tensor("peft_b_alpha")), kTol);
  EXPECT_EQ(p->transformer->compiled_modules().size(), graphs_before);
}

TEST(Lora, ALayerThatHadNoLoraAtCompileTimeIsRefusedAfterwards) {
  // Through the manager (DiffusionPipeline::compile marks it): the load is refused, naming the layers, and the
  // adapters already loaded keep working.
  auto p = tiny();
  auto m = manager(*p);
  m.load(kLora + "peft_a.safetensors", "a");
  p->transformer->compile(diffq::compile::CompileOptions{});
  m.mark_compiled();
  const std::string e = diffq::testing::error_of([&] { m.load(kLora + "peft_b_alpha.safetensors", "b"); });
  EXPECT_NE(e.find("compiled before these layers had a LoRA"), std::string::npos) << e;
  EXPECT_NE(e.find("transformer.norm_out.linear"), std::string::npos) << e;  // peft_a has no LoRA there
  EXPECT_EQ(m.adapters(), std::vector<std::string>{"a"});
  EXPECT_LE(rel_err(run(*p), ref().tensor("peft_a")), kTol);

  // The compiled graph's own guard (compile/compiled_graph.cpp) for an adapter attached behind the manager's back
  // to a quantized Linear the graph computes as a quantized GEMM: an error at run time, never an ignored LoRA.
  auto q = tiny("int8wo");
  q->transformer->compile(diffq::compile::CompileOptions{});
  (void)run(*q);  // captured without adapters
  auto mq = manager(*q);  // not marked compiled
  mq.load(kLora + "peft_a.safetensors", "a");
  const std::string eq = diffq::testing::error_of([&] { (void)run(*q); });
  EXPECT_NE(eq.find("needs a recompile"), std::string::npos) << eq;
}

TEST(Lora, GroupOffloadEqualsNoOffload) {
  auto p = tiny();
  auto m = manager(*p);
  m.load(kLora + "peft_a.safetensors", "a");
  diffq::offload::GroupOffloadOptions o;
  o.num_blocks_per_group = 1;
  p->enable_group_offload(o);
  EXPECT_LE(rel_err(run(*p), ref().tensor("peft_a")), kTol);
  const std::string e = diffq::testing::error_of([&] { m.fuse(); });
  EXPECT_NE(e.find("offload"), std::string::npos) << e;
}

TEST(Lora, Nf4BaseRunsTheLoraUnfused) {
  // fuse_lora fuses only the dense layers: the quantized ones keep the LoRA unfused (and unfuse restores them).
  // The nf4 base + LoRA output is checked against Diffusers + PEFT + bitsandbytes in test_lora_nf4.cpp.
  auto p = tiny("nf4");
  auto m = manager(*p);
  m.load(kLora + "peft_a.safetensors", "a");
  const Tensor unfused = run(*p);
  const auto left = m.fuse();
  EXPECT_FALSE(left.empty());
  m.unfuse();
  EXPECT_EQ(rel_err(run(*p), unfused), 0.0);
}

}  // namespace
