// UMT5EncoderModel (T5EncoderModel with T5Config::umt5) against transformers 5.24, and WanPipeline's
// _get_t5_prompt_embeds (wan_encode_prompt) against diffusers 0.42.1's WanPipeline.encode_prompt, on the tiny
// random UMT5 of tests/fixtures/umt5 (tools/reference/make_umt5_fixtures.py). Error figure: max |diffq - torch| /
// max |torch| over the tensor.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "common/error_of.h"
#include "diffq/error.h"
#include "io/diffusers_folder.h"
#include "io/safetensors.h"
#include "models/t5/t5_encoder.h"
#include "modules/quantize_on_load.h"
#include "pipelines/wan_prompt.h"
#include "quant/quant_method.h"
#include "tokenizers/t5_tokenizer.h"

using namespace diffq;
using diffq::testing::error_of;

namespace {

const std::filesystem::path kRoot = std::filesystem::path(DIFFQ_SOURCE_DIR) / "tests" / "fixtures";

const io::DiffusersFolder& folder() {
  static const io::DiffusersFolder f = io::DiffusersFolder::open(kRoot / "umt5");
  return f;
}

const io::SafetensorsFile& reference() {
  static const io::SafetensorsFile f = io::SafetensorsFile::open(kRoot / "umt5" / "reference" / "umt5.safetensors");
  return f;
}

const io::SafetensorsFile& wan_reference() {
  static const io::SafetensorsFile f =
      io::SafetensorsFile::open(kRoot / "umt5" / "reference" / "wan_prompt.safetensors");
  return f;
}

double max_rel_err(const Tensor& got, const Tensor& want) {
  EXPECT_EQ(got.shape(), want.shape());
  const std::vector<double> a = got.to_f64_vector(), b = want.to_f64_vector();
  if (a.size() != b.size()) return INFINITY;
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    diff = std::max(diff, std::abs(a[i] - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  return diff / scale;
}

}  // namespace

TEST(UMT5EncoderModel, ConfigAndKeys) {
  const auto c = t5::T5Config::from_json(folder().component("text_encoder").config);
  EXPECT_TRUE(c.umt5);
  EXPECT_EQ(c.vocab_size, 32128);
  EXPECT_EQ(c.d_model, 8);
  EXPECT_EQ(c.num_layers, 2);
  EXPECT_EQ(c.dense_act_fn, "gelu_new");
  EXPECT_TRUE(c.is_gated_act);
  // The FLUX T5 config is not UMT5.
  const auto flux = io::DiffusersFolder::open(kRoot / "tiny-flux");
  EXPECT_FALSE(t5::T5Config::from_json(flux.component("text_encoder_2").config).umt5);
  // UMT5Config's defaults for keys a config leaves out.
  const auto d = t5::T5Config::from_json(io::JsonConfig(nlohmann::json{{"model_type", "umt5"}}, "umt5.json"));
  EXPECT_TRUE(d.umt5);
  EXPECT_EQ(d.vocab_size, 250112);
  EXPECT_EQ(d.d_ff, 1024);
  EXPECT_EQ(d.num_layers, 8);
  EXPECT_EQ(d.num_heads, 6);
  EXPECT_TRUE(d.is_gated_act);
  // Every block owns a relative_attention_bias (a strict load of the fixture would fail otherwise).
  auto m = t5::UMT5EncoderModel::from_pretrained(folder(), "text_encoder", DType::f32);
  int n = 0;
  for (const auto& [name, p] : m->named_parameters())
    if (name.find("relative_attention_bias") != std::string::npos) ++n;
  EXPECT_EQ(n, 2);
  // UMT5EncoderModel refuses a T5 config.
  EXPECT_NE(error_of([&] { t5::UMT5EncoderModel::from_pretrained(flux, "text_encoder_2"); }).find("not an UMT5"),
            std::string::npos);
}

TEST(UMT5EncoderModel, MatchesTransformersFloat32) {
  auto m = t5::UMT5EncoderModel::from_pretrained(folder(), "text_encoder", DType::f32);
  const Tensor ids = reference().tensor("input_ids"), mask = reference().tensor("attention_mask");
  const Tensor masked = (*m)(ids, mask), unmasked = (*m)(ids);
  EXPECT_EQ(masked.dtype(), DType::f32);
  const double e_m = max_rel_err(masked, reference().tensor("masked_f32"));
  const double e_u = max_rel_err(unmasked, reference().tensor("unmasked_f32"));
  std::printf("[umt5] fp32 vs transformers: masked %.3g, unmasked %.3g\n", e_m, e_u);
  EXPECT_LE(e_m, 1e-4);
  EXPECT_LE(e_u, 1e-4);
}

// bf16 compute against transformers' own bf16 run. On this d_model-8 model both bf16 runs sit ~1 bf16 ulp (of
// the largest output) from the float32 reference, and diffq's rounding points differ from torch's (gelu_new
// rounds once, not per op; bf16 attention tiles or widened f32 ones depending on the CPU). Measured 2026-12-02
// (AVX512-BF16 machine): vs transformers bf16 1.00e-2 masked / 6.9e-3 unmasked (1.17e-2 / 7.0e-3 with
// DIFFQ_GEMM_KERNEL=diffq-widen); vs float32 diffq 1.30e-2 / 1.28e-2 where transformers' bf16 run is
// 9.6e-3 / 9.3e-3. Bounds: 2x the first, 1.5x transformers' own distance for the second.
TEST(UMT5EncoderModel, MatchesTransformersBFloat16) {
  auto m = t5::UMT5EncoderModel::from_pretrained(folder(), "text_encoder", DType::bf16);
  EXPECT_EQ(m->encoder.block[1].layer.ff.DenseReluDense.wo.weight.dtype(), DType::bf16);
  const Tensor ids = reference().tensor("input_ids"), mask = reference().tensor("attention_mask");
  for (const char* kind : {"masked", "unmasked"}) {
    const Tensor out = std::string(kind) == "masked" ? (*m)(ids, mask) : (*m)(ids);
    EXPECT_EQ(out.dtype(), DType::bf16);
    const Tensor ref32 = reference().tensor(std::string(kind) + "_f32");
    const Tensor ref16 = reference().tensor(std::string(kind) + "_bf16");
    const double e = max_rel_err(out, ref16), e32 = max_rel_err(out, ref32), torch32 = max_rel_err(ref16, ref32);
    std::printf("[umt5] bf16 %s vs transformers bf16: %.4g (vs fp32: diffq %.4g, transformers bf16 %.4g)\n", kind, e,
                e32, torch32);
    EXPECT_LE(e, 2.4e-2) << kind;
    EXPECT_LE(e32, 1.5 * torch32) << kind;
  }
}

TEST(UMT5EncoderModel, Float16KeepsWoInFloat32) {
  auto m = t5::UMT5EncoderModel::from_pretrained(folder(), "text_encoder", DType::f16);
  EXPECT_EQ(m->encoder.block[1].layer.ff.DenseReluDense.wo.weight.dtype(), DType::f32);
  EXPECT_EQ(m->encoder.block[1].layer.self_attention.SelfAttention.relative_attention_bias.weight.dtype(),
            DType::f16);
  const Tensor out = (*m)(reference().tensor("input_ids"), reference().tensor("attention_mask"));
  EXPECT_EQ(out.dtype(), DType::f16);
  const double e = max_rel_err(out.to(DType::f32), reference().tensor("masked_f32"));
  std::printf("[umt5] fp16 (wo in fp32) vs fp32 reference: %.4g\n", e);
  EXPECT_LE(e, 5e-3);
}

// The quantization hooks reach the UMT5 Linear layers as they do T5's (torchao int8 weight-only here).
TEST(UMT5EncoderModel, LoadsWithQuantizationHooks) {
  const auto [backend, kwargs] = quant::quant_shorthand("int8wo", "float32");
  std::shared_ptr<const quant::QuantMethod> method = quant::make_quant_method(backend, kwargs);
  LoadOptions hooks;
  attach_quantization(hooks, method, /*pre_quantized=*/false);
  auto m = t5::UMT5EncoderModel::from_pretrained(folder(), "text_encoder", DType::f32, hooks);
  const QuantizationSummary s = summarize_quantization(*m);
  EXPECT_GT(s.quantized, 0);
  EXPECT_TRUE(m->encoder.block[1].layer.self_attention.SelfAttention.q.weight.is_quantized());
  EXPECT_FALSE(m->encoder.block[1].layer.self_attention.SelfAttention.relative_attention_bias.weight.is_quantized());
  const Tensor out = (*m)(reference().tensor("input_ids"), reference().tensor("attention_mask"));
  const double e = max_rel_err(out, reference().tensor("masked_f32"));
  std::printf("[umt5] int8 weight-only vs fp32 reference: %.4g\n", e);
  EXPECT_LE(e, 5e-2);
}

// ---- WanPipeline.encode_prompt ----

namespace {
const nlohmann::json& wan_case() {
  static const nlohmann::json j = [] {
    std::ifstream f(kRoot / "umt5" / "reference" / "wan_prompt.json");
    return nlohmann::json::parse(f);
  }();
  return j;
}
}  // namespace

TEST(WanEncodePrompt, MatchesDiffusersFloat32) {
  auto m = t5::UMT5EncoderModel::from_pretrained(folder(), "text_encoder", DType::f32);
  const auto tok = tokenizers::T5Tokenizer::from_pretrained(kRoot / "tiny-flux" / "tokenizer_2");
  const auto prompts = wan_case()["prompts"].get<std::vector<std::string>>();
  const int64_t L = wan_case()["max_sequence_length"].get<int64_t>();
  const Tensor got = wan_encode_prompt(*m, tok, prompts, L, DType::f32);
  const Tensor want = wan_reference().tensor("prompt_embeds_f32");
  EXPECT_EQ(got.dtype(), DType::f32);
  const double e = max_rel_err(got, want);
  std::printf("[wan] encode_prompt fp32 vs Diffusers: %.3g\n", e);
  EXPECT_LE(e, 1e-4);
  // The rows past each prompt's token count are exactly zero (as Diffusers' new_zeros).
  const auto lengths = wan_case()["token_lengths"].get<std::vector<int64_t>>();
  const std::vector<float> v = got.to_f32_vector();
  const int64_t D = got.size(2);
  for (size_t b = 0; b < lengths.size(); ++b)
    for (int64_t s = std::min(lengths[b], L); s < L; ++s)
      for (int64_t d = 0; d < D; ++d) ASSERT_EQ(v[(b * L + s) * D + d], 0.f) << "prompt " << b << " row " << s;
  // num_videos_per_prompt repeats each row in place: p0, p0, p1, p1, ...
  const Tensor two = wan_encode_prompt(*m, tok, {prompts[1], prompts[3]}, L, DType::f32, 2);
  ASSERT_EQ(two.shape(), (Shape{4, L, D}));
  EXPECT_LE(max_rel_err(two.slice(0, 1, 2), want.slice(0, 1, 2)), 1e-4);
  EXPECT_LE(max_rel_err(two.slice(0, 2, 3), want.slice(0, 3, 4)), 1e-4);
}

TEST(WanEncodePrompt, MatchesDiffusersBFloat16) {
  auto m = t5::UMT5EncoderModel::from_pretrained(folder(), "text_encoder", DType::bf16);
  const auto tok = tokenizers::T5Tokenizer::from_pretrained(kRoot / "tiny-flux" / "tokenizer_2");
  const auto prompts = wan_case()["prompts"].get<std::vector<std::string>>();
  const int64_t L = wan_case()["max_sequence_length"].get<int64_t>();
  const Tensor got = wan_encode_prompt(*m, tok, prompts, L, DType::bf16);
  EXPECT_EQ(got.dtype(), DType::bf16);
  const Tensor ref16 = wan_reference().tensor("prompt_embeds_bf16");
  const Tensor ref32 = wan_reference().tensor("prompt_embeds_f32");
  const double e = max_rel_err(got, ref16), e32 = max_rel_err(got, ref32), torch32 = max_rel_err(ref16, ref32);
  std::printf("[wan] encode_prompt bf16 vs Diffusers bf16: %.4g (vs fp32: diffq %.4g, Diffusers bf16 %.4g)\n", e, e32,
              torch32);
  // Measured 2026-12-02: 1.54e-2 (1.37e-2 diffq-widen); vs float32 1.80e-2 where Diffusers' bf16 is 2.12e-2.
  EXPECT_LE(e, 3e-2);
  EXPECT_LE(e32, 1.1 * torch32);
}

TEST(WanEncodePrompt, RejectsBadArguments) {
  auto m = t5::UMT5EncoderModel::from_pretrained(folder(), "text_encoder", DType::f32);
  const auto tok = tokenizers::T5Tokenizer::from_pretrained(kRoot / "tiny-flux" / "tokenizer_2");
  EXPECT_NE(error_of([&] { wan_encode_prompt(*m, tok, {}, 8, DType::f32); }).find("no prompt"), std::string::npos);
  EXPECT_NE(error_of([&] { wan_encode_prompt(*m, tok, {"a"}, 0, DType::f32); }).find("max_sequence_length"),
            std::string::npos);
}
