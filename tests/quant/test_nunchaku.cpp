// Nunchaku Lite (quant_method "nunchaku_lite") per-Linear checks against tests/fixtures/quant-nunchaku/
// linears.safetensors, written by tools/reference/make_quant_nunchaku.py: a torch reference of the
// layouts and of the nunchaku kernels' math (Diffusers runs these checkpoints only on a CUDA GPU).
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "common/max_rel.h"
#include "diffq/error.h"
#include "io/safetensors.h"
#include "quant/nunchaku/nunchaku.h"
#include "quant/quant_method.h"

namespace {

using diffq::DType;
using diffq::Shape;
using diffq::Tensor;
namespace nk = diffq::quant::nunchaku;
using diffq::testing::max_rel;

const std::string kFix = DIFFQ_SOURCE_DIR "/tests/fixtures/quant-nunchaku/";

const diffq::io::StateDict& fx() {
  static const auto t = diffq::io::SafetensorsFile::open(kFix + "linears.safetensors").tensors();
  return t;
}

// "<case>.layer.<key>" -> "<key>" under module "layer".
diffq::io::StateDict layer(const std::string& c) {
  diffq::io::StateDict sd;
  const std::string p = c + ".layer.";
  for (const auto& [k, v] : fx())
    if (k.rfind(p, 0) == 0) sd["layer." + k.substr(p.size())] = v;
  return sd;
}

const Tensor& ref(const std::string& c, const std::string& k) { return fx().at(c + ".ref." + k); }

std::shared_ptr<nk::SvdqW4A4Weight> load_svdq(const std::string& c, const diffq::io::StateDict& sd, int64_t rank) {
  const Tensor& codes = ref(c, "codes");
  std::vector<std::string> consumed;
  return nk::SvdqW4A4Weight::load(sd, "layer", codes.shape(), rank, 64, consumed);
}

bool bit_equal(const Tensor& a, const Tensor& b) {
  const auto x = a.to_f32_vector(), y = b.to_f32_vector();
  return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
}

// The library's dequantization of the residual: code * wscale in float32 (torch), from the reference's
// codes and logical scales.
Tensor residual_reference(const Tensor& codes, const Tensor& wscales) {
  const int64_t n = codes.shape()[0], k = codes.shape()[1];
  const auto c = codes.to_f32_vector(), s = wscales.to_f32_vector();
  std::vector<float> w(size_t(n * k));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < k; ++j) w[size_t(i * k + j)] = c[size_t(i * k + j)] * s[size_t((j / 64) * n + i)];
  return Tensor::from_vector(w, {n, k});
}

struct SvdqCase {
  const char* name;
  int64_t rank;
  bool packed;
};

class NunchakuSvdq : public ::testing::TestWithParam<SvdqCase> {};

TEST_P(NunchakuSvdq, DecodesCodesAndResidualBitExact) {
  const auto c = GetParam();
  const auto w = load_svdq(c.name, layer(c.name), c.rank);
  EXPECT_EQ(w->packed(), c.packed);
  EXPECT_TRUE(bit_equal(w->codes(), ref(c.name, "codes")));
  EXPECT_TRUE(bit_equal(w->dequantize_residual(), residual_reference(ref(c.name, "codes"), ref(c.name, "wscales"))));
}

TEST_P(NunchakuSvdq, ForwardMatchesTorchReference) {
  const auto c = GetParam();
  const auto sd = layer(c.name);
  const auto w = load_svdq(c.name, sd, c.rank);
  const Tensor bias = sd.at("layer.bias").to(DType::f32);  // the Linear's bias, in the checkpoint's order
  const Tensor& x = ref(c.name, "x");
  const Tensor y = w->linear(x, bias), yr = w->linear_reference(x, bias);
  const double e = max_rel(y, ref(c.name, "y")), er = max_rel(yr, ref(c.name, "y"));
  std::printf("[%s] linear %.3g, scalar reference %.3g\n", c.name, e, er);
  EXPECT_LE(e, 1e-5);
  EXPECT_LE(er, 1e-5);
  // bfloat16 input: the same math on x's values, output rounded to bfloat16
  const Tensor yb = w->linear(x.to(DType::bf16), bias);
  EXPECT_EQ(yb.dtype(), DType::bf16);
}

INSTANTIATE_TEST_SUITE_P(Layouts, NunchakuSvdq,
                         ::testing::Values(SvdqCase{"svdq_packed", 16, true}, SvdqCase{"svdq_logical", 8, false}),
                         [](const auto& i) { return std::string(i.param.name); });

TEST(NunchakuSvdqDense, DenseEquivalentMatchesReference) {
  const auto w = load_svdq("svdq_logical", layer("svdq_logical"), 8);
  EXPECT_LE(max_rel(w->dequantize(DType::f32), ref("svdq_logical", "dense")), 1e-6);
}

TEST(NunchakuAwq, DequantizesBitExact) {
  std::vector<std::string> consumed;
  const auto w = nk::AwqW4A16Weight::load(layer("awq"), "layer", {32, 128}, 64, consumed);
  EXPECT_EQ(consumed.size(), 3u);
  EXPECT_TRUE(bit_equal(w->dequantize(DType::f32), ref("awq", "weight")));
}

// ---- malformed checkpoints and configs: errors name the tensor / field

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const diffq::Error& e) {
    return e.what();
  }
  return "";
}

TEST(NunchakuErrors, MalformedTensorsAreNamed) {
  std::vector<std::string> consumed;
  auto sd = layer("svdq_packed");
  sd.erase("layer.proj_up");
  std::string m = error_of([&] { nk::SvdqW4A4Weight::load(sd, "layer", {128, 128}, 16, 64, consumed); });
  EXPECT_NE(m.find("layer.proj_up"), std::string::npos) << m;
  sd = layer("svdq_packed");
  m = error_of([&] { nk::SvdqW4A4Weight::load(sd, "layer", {128, 128}, 32, 64, consumed); });  // wrong rank
  EXPECT_NE(m.find("layer.proj_down"), std::string::npos) << m;
  sd = layer("svdq_packed");
  sd["layer.wscales"] = Tensor::zeros({3, 128}, DType::bf16);
  m = error_of([&] { nk::SvdqW4A4Weight::load(sd, "layer", {128, 128}, 16, 64, consumed); });
  EXPECT_NE(m.find("layer.wscales"), std::string::npos) << m;
  sd = layer("svdq_packed");
  sd["layer.qweight"] = Tensor::zeros({128, 64}, DType::f32);
  m = error_of([&] { nk::SvdqW4A4Weight::load(sd, "layer", {128, 128}, 16, 64, consumed); });
  EXPECT_NE(m.find("layer.qweight"), std::string::npos) << m;
  auto awq = layer("awq");
  awq["layer.wzeros"] = Tensor::zeros({2, 31}, DType::bf16);
  m = error_of([&] { nk::AwqW4A16Weight::load(awq, "layer", {32, 128}, 64, consumed); });
  EXPECT_NE(m.find("layer.wzeros"), std::string::npos) << m;
}

TEST(NunchakuErrors, ConfigChecksAsDiffusers) {
  using nlohmann::json;
  auto from = [](const json& j) { return error_of([&] { diffq::quant::quant_method_from_config(j, "config.json"); }); };
  EXPECT_NE(from({{"quant_method", "nunchaku_lite"}}).find("must include"), std::string::npos);
  EXPECT_NE(from({{"quant_method", "nunchaku_lite"},
                  {"svdq_w4a4", {{"precision", "int4"}, {"group_size", 64}, {"targets", {"a"}}}}})
                .find("'rank'"),
            std::string::npos);
  EXPECT_NE(from({{"quant_method", "nunchaku_lite"},
                  {"svdq_w4a4", {{"precision", "int4"}, {"group_size", 16}, {"rank", 32}, {"targets", {"a"}}}}})
                .find("group_size=64"),
            std::string::npos);
  EXPECT_NE(from({{"quant_method", "nunchaku_lite"},
                  {"svdq_w4a4", {{"precision", "nvfp4"}, {"group_size", 16}, {"rank", 32}, {"targets", {"a"}}}}})
                .find("nvfp4"),
            std::string::npos);
  const auto m = diffq::quant::quant_method_from_config(
      {{"quant_method", "nunchaku_lite"},
       {"compute_dtype", "bfloat16"},
       {"svdq_w4a4", {{"precision", "int4"}, {"group_size", 64}, {"rank", 32}, {"targets", {"a"}}}},
       {"awq_w4a16", {{"precision", "int4"}, {"group_size", 64}, {"targets", {"b"}}}}},
      "config.json");
  EXPECT_EQ(m->backend(), "nunchaku_lite");
  EXPECT_EQ(m->scheme(), "svdq_w4a4_int4_r32+awq_w4a16_int4");
}

}  // namespace
