// SDNQ against sdnq 0.2.8 (through Diffusers 0.42) on the tiny FLUX transformer: diffq's quantize-on-load
// gives the library's packed weight, scale and zero point bit for bit and picks the same Linear layers; its
// dequantization equals the library's SDNQDequantizer output bit for bit; a save_pretrained folder loads
// and dequantizes bit for bit; malformed configs name the field.
#include <gtest/gtest.h>

#include <algorithm>

#include "diffq/error.h"
#include "io/inspect.h"
#include "io/safetensors.h"
#include "quant/quant_method.h"
#include "quant/sdnq/sdnq_config.h"
#include "quant/sdnq/sdnq_weight.h"
#include "quant/sdnq_autoround_fixture.h"

namespace {

using namespace diffq;
using diffq::testing::fnv1a64;
namespace sq = diffq::quant::sdnq;

const io::StateDict& tiny_transformer() {
  static const io::SafetensorsFile f = io::SafetensorsFile::open(
      diffq::testing::tiny_flux_root() / "transformer/diffusion_pytorch_model.safetensors");
  static const io::StateDict sd = f.tensors();
  return sd;
}

// The library's weight / scale / zero_point tensors: "stored" = FNV-1a 64 of their ";"-joined descriptions.
void expect_same_tensors(const sq::SdnqWeight& w, const nlohmann::json& e, const std::string& module) {
  io::StateDict out;
  w.save(out, module);
  std::string joined;
  for (const char* k : {"weight", "scale", "zero_point"})
    if (out.count(module + "." + k)) joined += (joined.empty() ? "" : ";") + diffq::testing::tensor_desc(out.at(module + "." + k));
  EXPECT_EQ(diffq::testing::fnv1a64_str(joined), e.at("stored").get<std::string>()) << joined;
}

TEST(SdnqQuantizeOnLoad, EqualsTheLibraryBitForBit) {
  const auto& cases = diffq::testing::sdnq_ar_cases().at("sdnq");
  ASSERT_GE(cases.size(), 7u);
  for (const auto& [name, c] : cases.items()) {
    SCOPED_TRACE(name);
    auto m = quant::make_quant_method("sdnq", c.at("quant_kwargs"));
    int quantized = 0;
    for (const auto& dense : c.at("dense")) {
      const std::string mod = dense.get<std::string>();
      EXPECT_FALSE(m->should_quantize(mod, tiny_transformer().at(mod + ".weight").shape())) << mod;
    }
    for (const auto& [mod, e] : c.at("modules").items()) {
      SCOPED_TRACE(mod);
      const Tensor w = tiny_transformer().at(mod + ".weight");
      ASSERT_TRUE(m->should_quantize(mod, w.shape()));
      const auto q = m->quantize_named(mod, w);
      const auto* sw = dynamic_cast<const sq::SdnqWeight*>(q.get());
      ASSERT_NE(sw, nullptr);
      EXPECT_EQ(std::string(sw->dtype_traits().name), e.at("weights_dtype").get<std::string>());
      expect_same_tensors(*sw, e, mod);
      EXPECT_EQ(diffq::testing::tensor_desc(q->dequantize(DType::f32)), e.at("dequantized").get<std::string>());
      ++quantized;
    }
    EXPECT_GT(quantized, 0);
    // The saved config lists every dense Linear, as the library's does.
    const auto saved = m->quantization_config();
    EXPECT_EQ(saved.at("quant_method"), "sdnq");
    for (const auto& dense : c.at("dense")) {
      const auto& skip = saved.at("modules_to_not_convert");
      EXPECT_NE(std::find(skip.begin(), skip.end(), dense.get<std::string>() + ".weight"), skip.end()) << dense;
    }
  }
}

TEST(SdnqPrequantized, SavePretrainedFolderLoadsAndDequantizesBitForBit) {
  const auto& pq = diffq::testing::sdnq_ar_cases().at("prequant_sdnq");
  const auto dir = diffq::testing::sdnq_ar_root() / pq.at("folder").get<std::string>() / "transformer";
  const auto config = diffq::testing::read_json_file(dir / "config.json");
  auto m = quant::quant_method_from_config(config.at("quantization_config"), (dir / "config.json").string());
  EXPECT_EQ(m->backend(), "sdnq");
  const auto f = io::SafetensorsFile::open(dir / "diffusion_pytorch_model.safetensors");
  const io::StateDict sd = f.tensors();
  int n = 0;
  for (const auto& [mod, e] : pq.at("modules").items()) {
    SCOPED_TRACE(mod);
    std::vector<std::string> consumed;
    const std::string deq = e.at("dequantized").get<std::string>();
    const auto w = m->load(sd, mod, diffq::testing::desc_shape(deq), nullptr, consumed);
    ASSERT_NE(w, nullptr);
    EXPECT_EQ(diffq::testing::tensor_desc(w->dequantize(DType::f32)), deq);
    EXPECT_GE(consumed.size(), 2u);
    // Written back, the same tensors.
    io::StateDict out;
    io::Metadata md;
    m->save(*w, mod, out, md);
    for (const auto& [k, t] : out) EXPECT_EQ(fnv1a64(t), fnv1a64(sd.at(k))) << k;
    ++n;
  }
  EXPECT_GT(n, 10);
  for (const auto& dense : pq.at("dense")) {
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

TEST(SdnqErrors, MalformedConfigsNameTheField) {
  using nlohmann::json;
  auto make = [](json j) { return [j] { quant::make_quant_method("sdnq", j); }; };
  EXPECT_NE(error_of(make({{"weights_dtype", "int5"}})).find("weights_dtype 'int5'"), std::string::npos);
  EXPECT_NE(error_of(make({{"weights_dtype", "float4_e2m1fn"}})).find("float4_e2m1fn"), std::string::npos);
  EXPECT_NE(error_of(make({{"use_svd", true}})).find("use_svd"), std::string::npos);
  EXPECT_NE(error_of(make({{"use_hadamard", true}})).find("use_hadamard"), std::string::npos);
  EXPECT_NE(error_of(make({{"use_codebook", true}})).find("use_codebook"), std::string::npos);
  EXPECT_NE(error_of(make({{"scale_dtype", "int8"}})).find("scale_dtype"), std::string::npos);
  EXPECT_NE(error_of(make({{"use_quantized_matmul", true}})).find("use_quantized_matmul"), std::string::npos);
  EXPECT_NE(error_of(make({{"use_stochastic_rounding", true}})).find("use_stochastic_rounding"), std::string::npos);
  EXPECT_NE(error_of(make({{"group_size", "16"}})).find("group_size"), std::string::npos);
  EXPECT_NE(error_of(make({{"group_size", -3}})).find("group_size=-3"), std::string::npos);
  EXPECT_NE(error_of(make({{"modules_dtype_dict", {{"int6", json::array({"x"})}}}})).find("int6"), std::string::npos);
  EXPECT_NE(error_of([] { quant::quant_shorthand("sdnq-int3", "float32"); }).find("int3"), std::string::npos);
  // Pre-quantized: stochastic rounding is only a quantize-time option; the file layout must match.
  EXPECT_NO_THROW(quant::quant_method_from_config({{"quant_method", "sdnq"}, {"use_stochastic_rounding", true}}, "x"));
  auto m = quant::quant_method_from_config({{"quant_method", "sdnq"}, {"weights_dtype", "uint4"}}, "cfg.json");
  io::StateDict sd;
  sd["l.weight"] = Tensor::zeros({7}, DType::u8);  // 16 codes need 8 bytes
  sd["l.scale"] = Tensor::zeros({4, 1}, DType::f32);
  sd["l.zero_point"] = Tensor::zeros({4, 1}, DType::f32);
  std::vector<std::string> consumed;
  EXPECT_NE(error_of([&] { m->load(sd, "l", {4, 4}, nullptr, consumed); }).find("8 bytes"), std::string::npos);
  sd["l.weight"] = Tensor::zeros({8}, DType::u8);
  sd.erase("l.zero_point");
  EXPECT_NE(error_of([&] { m->load(sd, "l", {4, 4}, nullptr, consumed); }).find("zero_point"), std::string::npos);
  sd["l.zero_point"] = Tensor::zeros({4, 1}, DType::f32);
  sd["l.svd_up"] = Tensor::zeros({4, 1}, DType::f32);
  EXPECT_NE(error_of([&] { m->load(sd, "l", {4, 4}, nullptr, consumed); }).find("svd_up"), std::string::npos);
}

TEST(SdnqShorthand, NamesMapToWeightsDtype) {
  EXPECT_EQ(quant::quant_shorthand("sdnq-uint4", "bfloat16").second.at("weights_dtype"), "uint4");
  EXPECT_EQ(quant::quant_shorthand("sdnq-fp8", "bfloat16").second.at("weights_dtype"), "float8_e4m3fn");
  EXPECT_EQ(quant::quant_shorthand("sdnq-int8", "bfloat16").first, "sdnq");
}

TEST(SdnqInspect, NamesTheFormat) {  // diffq inspect <folder>: the transformer's quantization_config
  const auto j = io::inspect_json((diffq::testing::sdnq_ar_root() / "prequant-sdnq").string());
  const std::string text = io::inspect_text(j);
  EXPECT_NE(text.find("\"quant_method\":\"sdnq\""), std::string::npos) << text;
  EXPECT_NE(text.find("\"weights_dtype\":\"uint2\""), std::string::npos) << text;
}

}  // namespace
