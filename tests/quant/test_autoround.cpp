// AutoRound (auto-round 0.16) checkpoints: the tiny FLUX transformer quantized by auto-round (RTN, int4,
// asymmetric, group 32, "auto_round" packing) loads and every weight dequantizes to what auto-round's torch
// QuantLinear computes, bit for bit; configs diffq cannot run are refused naming the field.
#include <gtest/gtest.h>

#include "diffq/error.h"
#include "io/inspect.h"
#include "io/safetensors.h"
#include "quant/autoround/autoround_weight.h"
#include "quant/quant_method.h"
#include "quant/sdnq_autoround_fixture.h"

namespace {

using namespace diffq;
using diffq::testing::fnv1a64;

TEST(AutoRoundPrequantized, EveryWeightDequantizesLikeQuantLinear) {
  const auto& ar = diffq::testing::sdnq_ar_cases().at("autoround");
  const auto dir = diffq::testing::sdnq_ar_root() / ar.at("folder").get<std::string>() / "transformer";
  const auto config = diffq::testing::read_json_file(dir / "config.json");
  auto m = quant::quant_method_from_config(config.at("quantization_config"), (dir / "config.json").string());
  EXPECT_EQ(m->backend(), "auto-round");
  const auto f = io::SafetensorsFile::open(dir / "diffusion_pytorch_model.safetensors");
  const io::StateDict sd = f.tensors();
  int n = 0;
  for (const auto& [mod, e] : ar.at("modules").items()) {
    SCOPED_TRACE(mod);
    std::vector<std::string> consumed;
    const std::string deq = e.at("dequantized").get<std::string>();
    const auto w = m->load(sd, mod, diffq::testing::desc_shape(deq), nullptr, consumed);
    ASSERT_NE(w, nullptr);
    EXPECT_EQ(diffq::testing::tensor_desc(w->dequantize(DType::f32)), deq);
    EXPECT_EQ(consumed.size(), 3u);
    io::StateDict out;
    io::Metadata md;
    m->save(*w, mod, out, md);
    for (const auto& [k, t] : out) EXPECT_EQ(fnv1a64(t), fnv1a64(sd.at(k))) << k;
    ++n;
  }
  EXPECT_GT(n, 10);
  for (const auto& dense : ar.at("dense")) {
    std::vector<std::string> consumed;
    EXPECT_EQ(m->load(sd, dense.get<std::string>(), {1, 1}, nullptr, consumed), nullptr) << dense;
  }
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(AutoRoundErrors, MalformedConfigsNameTheField) {
  using nlohmann::json;
  auto make = [](json j) {
    j["quant_method"] = "auto-round";
    return [j] { quant::quant_method_from_config(j, "config.json"); };
  };
  EXPECT_NE(error_of(make({{"bits", 3}})).find("bits=3"), std::string::npos);
  EXPECT_NE(error_of(make({{"data_type", "mx_fp"}})).find("data_type 'mx_fp'"), std::string::npos);
  EXPECT_NE(error_of(make({{"packing_format", "auto_round:auto_awq"}})).find("packing_format"), std::string::npos);
  EXPECT_NE(error_of(make({{"act_bits", 8}})).find("act_bits=8"), std::string::npos);
  EXPECT_NE(error_of(make({{"group_size", "x"}})).find("group_size"), std::string::npos);
  EXPECT_NE(error_of(make({{"extra_config", {{"a.b", {{"bits", 5}}}}}})).find("extra_config.a.b"), std::string::npos);
  // AutoRound is load-only (as in Diffusers).
  auto m = quant::quant_method_from_config({{"quant_method", "auto-round"}}, "config.json");
  EXPECT_THROW(m->quantize(Tensor::zeros({32, 32}, DType::f32)), Error);
  EXPECT_FALSE(m->should_quantize("x", {32, 32}));
  // A file whose tensors disagree with the config.
  io::StateDict sd;
  sd["l.qweight"] = Tensor::zeros({4, 32}, DType::i32);
  sd["l.qzeros"] = Tensor::zeros({1, 4}, DType::i32);
  sd["l.scales"] = Tensor::zeros({1, 32}, DType::f16);  // group_size 128 over K = 32: one group
  std::vector<std::string> consumed;
  EXPECT_NO_THROW(m->load(sd, "l", {32, 32}, nullptr, consumed));
  EXPECT_NE(error_of([&] { m->load(sd, "l", {32, 64}, nullptr, consumed); }).find("qweight must be int32"),
            std::string::npos);
  sd.erase("l.scales");
  EXPECT_NE(error_of([&] { m->load(sd, "l", {32, 32}, nullptr, consumed); }).find("l.scales"), std::string::npos);
}

TEST(AutoRoundInspect, NamesTheFormat) {  // diffq inspect <folder>: the transformer's quantization_config
  const auto j = io::inspect_json((diffq::testing::sdnq_ar_root() / "prequant-autoround").string());
  const std::string text = io::inspect_text(j);
  EXPECT_NE(text.find("\"quant_method\":\"auto-round\""), std::string::npos) << text;
  EXPECT_NE(text.find("\"bits\":4"), std::string::npos) << text;
}

}  // namespace
