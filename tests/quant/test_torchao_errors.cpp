// torchao config parsing, legacy names, skip rules and the errors of bad configs or bad tensors.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "diffq/error.h"
#include "quant/torchao/torchao.h"

namespace {

using namespace diffq;
namespace tao = diffq::quant::torchao;
using nlohmann::json;

// The call throws diffq::Error whose message contains every one of `parts`.
template <class F>
void expect_error(F&& f, std::initializer_list<std::string> parts) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one mentioning " << *parts.begin();
  } catch (const Error& e) {
    for (const std::string& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
}

tao::Config cfg_of(const char* text) { return tao::Config::from_json(json::parse(text)); }

TEST(TorchaoConfig, UnknownNamesAreErrorsNamingThem) {
  expect_error([] { cfg_of(R"({"quant_type": {"default": {"_type": "Int9WeightOnlyConfig", "_data": {}}}})"); },
               {"Int9WeightOnlyConfig", "unknown"});
  expect_error([] { cfg_of(R"({"quant_type": "int3wo"})"); }, {"int3wo", "unknown"});
  expect_error([] { cfg_of(R"({"quant_method": "bitsandbytes", "quant_type": "int8wo"})"); }, {"bitsandbytes"});
  expect_error([] { cfg_of(R"({"load_in_4bit": true})"); }, {"quant_type"});
}

TEST(TorchaoConfig, Int4GroupSizeMustBeSupported) {
  for (int g : {32, 64, 128, 256}) {
    const tao::Config c = tao::Config::from_json({{"_type", "Int4WeightOnlyConfig"}, {"_data", {{"group_size", g}}}});
    EXPECT_EQ(c.group_size, g);
  }
  expect_error([] { cfg_of(R"({"_type": "Int4WeightOnlyConfig", "_data": {"group_size": 48}})"); }, {"group_size", "48"});
  expect_error([] { cfg_of(R"({"quant_type": "int4wo", "quant_type_kwargs": {"group_size": 16}})"); }, {"16"});
}

TEST(TorchaoConfig, InconsistentKwargsAreErrors) {
  expect_error([] { cfg_of(R"({"_type": "Int8WeightOnlyConfig", "_data": {"group_size": 32}})"); },
               {"group_size", "PerGroup"});
  expect_error([] {
    cfg_of(R"({"_type": "Float8DynamicActivationFloat8WeightConfig", "_data": {"granularity": [
      {"_type": "PerTensor", "_data": {}}, {"_type": "PerRow", "_data": {"dim": -1}}]}})");
  }, {"different granularities"});
  expect_error([] { cfg_of(R"({"_type": "IntxWeightOnlyConfig", "_data": {"granularity": {"_type": "PerAxis", "_data": {"axis": 1}}}})"); },
               {"axis", "1"});
  expect_error([] { cfg_of(R"({"_type": "IntxWeightOnlyConfig", "_data": {"weight_dtype": "int9"}})"); }, {"int9"});
  expect_error([] { cfg_of(R"({"_type": "Int8WeightOnlyConfig", "_version": 1, "_data": {}})"); }, {"version 1"});
  expect_error([] {
    cfg_of(R"({"_type": "Int8DynamicActivationInt8WeightConfig", "_data": {"granularity": {"_type": "PerGroup", "_data": {"group_size": 32}}}})");
  }, {"PerTensor or PerRow"});
  expect_error([] { cfg_of(R"({"_type": "Int4WeightOnlyConfig", "_data": {"int4_packing_format": "PRESHUFFLED"}})"); },
               {"PRESHUFFLED"});
  // PerRow float8 dynamic quantization needs bf16 weights (torchao asserts it)
  const tao::Config row = cfg_of(R"({"quant_type": "float8dq_e4m3_row"})");
  expect_error([&] { tao::quantize(Tensor::zeros({16, 32}, DType::f32), row); }, {"bfloat16"});
  // a group that does not divide K
  const tao::Config g32 = cfg_of(R"({"_type": "Int8WeightOnlyConfig", "_data": {"granularity": {"_type": "PerGroup", "_data": {"group_size": 32}}}})");
  expect_error([&] { tao::quantize(Tensor::zeros({4, 48}, DType::bf16), g32); }, {"48", "group_size 32"});
}

TEST(TorchaoConfig, LegacyNamesMapToVersion2Configs) {
  EXPECT_EQ(cfg_of(R"({"quant_type": "int8wo"})").kind, tao::Kind::Int8WeightOnly);
  EXPECT_EQ(cfg_of(R"({"quant_type": "int8dq"})").kind, tao::Kind::Int8DynamicActivationInt8Weight);
  const tao::Config i4 = cfg_of(R"({"quant_type": "int4wo", "quant_type_kwargs": {"group_size": 64}})");
  EXPECT_EQ(i4.kind, tao::Kind::Int4WeightOnly);
  EXPECT_EQ(i4.group_size, 64);
  EXPECT_EQ(cfg_of(R"({"quant_type": "float8wo"})").kind, tao::Kind::Float8WeightOnly);
  EXPECT_EQ(cfg_of(R"({"quant_type": "float8wo_e5m2"})").weight_float8, DType::f8_e5m2);
  EXPECT_EQ(cfg_of(R"({"quant_type": "float8dq_e4m3_tensor"})").granularity.type, tao::Granularity::PerTensor);
  const tao::Config row = cfg_of(R"({"quant_type": "float8dq_e4m3_row"})");
  EXPECT_EQ(row.granularity.type, tao::Granularity::PerRow);
  EXPECT_EQ(row.act_granularity.type, tao::Granularity::PerRow);
  for (const char* u : {"uint1wo", "uint4wo", "uint7wo"})
    expect_error([&] { tao::Config::from_json({{"quant_type", u}}); }, {u, "not supported yet"});
  // to_json writes the version-2 config Diffusers >= 0.38 understands
  EXPECT_EQ(cfg_of(R"({"quant_type": "int8wo"})").to_json()["quant_type"]["default"]["_type"], "Int8WeightOnlyConfig");
}

TEST(TorchaoConfig, ShouldQuantizeSkipRules) {
  const tao::Config i4 = cfg_of(R"({"_type": "Int4WeightOnlyConfig", "_data": {"group_size": 32}})");
  EXPECT_FALSE(tao::should_quantize("x_embedder", {3072, 16}, i4));  // K % group_size != 0
  EXPECT_TRUE(tao::should_quantize("x_embedder", {3072, 64}, i4));
  const tao::Config f8dq = cfg_of(R"({"quant_type": "float8dq_e4m3_tensor"})");
  EXPECT_FALSE(tao::should_quantize("a", {24, 64}, f8dq));
  EXPECT_FALSE(tao::should_quantize("a", {64, 24}, f8dq));
  EXPECT_TRUE(tao::should_quantize("a", {64, 32}, f8dq));
  EXPECT_TRUE(tao::should_quantize("a", {24, 24}, cfg_of(R"({"quant_type": "float8wo"})")));  // weight-only: no rule
  const tao::Config skip = cfg_of(R"({"quant_type": "int8wo", "modules_to_not_convert": ["proj_out", "blocks.1"]})");
  EXPECT_FALSE(tao::should_quantize("proj_out", {4, 4}, skip));
  EXPECT_FALSE(tao::should_quantize("single.blocks.1.attn.to_q", {4, 4}, skip));
  EXPECT_TRUE(tao::should_quantize("single.blocks.10.attn", {4, 4}, skip));
  EXPECT_TRUE(tao::should_quantize("proj_out_2", {4, 4}, skip));
}

TEST(TorchaoLoad, WrongTensorsAreErrorsNamingTheKey) {
  const tao::Config c = cfg_of(R"({"quant_type": "int8wo"})");
  auto w = tao::quantize(Tensor::full({8, 16}, 0.5, DType::bf16), c);
  tao::StateDict sd;
  tao::Metadata md;
  tao::save(*w, "m.lin", sd, &md);
  EXPECT_NO_THROW(tao::load(sd, "m.lin", {8, 16}, c, &md));
  expect_error([&] { tao::load(sd, "m.lin", {8, 32}, c, &md); }, {"m.lin._weight_qdata", "shape"});
  expect_error([&] { tao::load(sd, "other", {8, 16}, c, &md); }, {"other._weight_qdata", "missing"});
  tao::StateDict bad = sd;
  bad["m.lin._weight_scale"] = sd["m.lin._weight_scale"].to(DType::bf16);
  expect_error([&] { tao::load(bad, "m.lin", {8, 16}, c, &md); }, {"m.lin._weight_scale", "dtype"});
  bad = sd;
  bad["m.lin._weight_qdata"] = sd["m.lin._weight_qdata"].to(DType::f32);
  expect_error([&] { tao::load(bad, "m.lin", {8, 16}, c, &md); }, {"m.lin._weight_qdata", "dtype"});
  bad = sd;
  bad["m.lin._weight_scale"] = Tensor::zeros({4, 1}, DType::f32);
  expect_error([&] { tao::load(bad, "m.lin", {8, 16}, c, &md); }, {"m.lin._weight_scale", "shape"});
  tao::Metadata bad_md = md;
  bad_md["m.lin.weight"] = R"({"_type": "NF4Tensor", "_data": {}})";
  expect_error([&] { tao::load(sd, "m.lin", {8, 16}, c, &bad_md); }, {"m.lin.weight", "NF4Tensor"});

  const tao::Config i4 = cfg_of(R"({"_type": "Int4WeightOnlyConfig", "_data": {"group_size": 32}})");
  auto w4 = tao::quantize(Tensor::full({8, 64}, 0.25, DType::bf16), i4);
  tao::StateDict sd4;
  tao::save(*w4, "q", sd4);
  sd4["q._weight_zero_point"] = sd4["q._weight_zero_point"].to(DType::f32);
  expect_error([&] { tao::load(sd4, "q", {8, 64}, i4); }, {"q._weight_zero_point", "dtype"});
}

}  // namespace
