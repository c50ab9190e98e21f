// optimum-quanto weights against optimum-quanto 0.2.7 on the CPU (tests/fixtures/quant/quanto/,
// tools/reference/make_quant_quanto.py): quantize and dequantize bit for bit (int8, float8 e4m3fn, int4,
// int2; float32 / bfloat16 / float16), the saved keys and packing, Diffusers' QuantoConfig folders, the
// fused linear, and the errors.
#include <gtest/gtest.h>

#include "core/random.h"
#include "diffq/error.h"
#include "ops/ops.h"
#include "quant/quanto/quanto.h"
#include "test_bnb_common.h"

namespace {

using diffq::DType;
using diffq::Shape;
using diffq::Tensor;
using namespace diffq::quant;
namespace fs = std::filesystem;
using bnbtest::same_bytes;

fs::path root() { return bnbtest::fixtures() / "quant" / "quanto"; }
const diffq::io::StateDict& fx() {
  static const auto t = diffq::io::SafetensorsFile::open(root() / "cases.safetensors").tensors();
  return t;
}
const nlohmann::json& cases() {
  static const auto j = bnbtest::read_json(root() / "cases.json")["cases"];
  return j;
}
const Tensor& T(const std::string& k) { return fx().at(k); }

QuantoQType qtype_of(const std::string& s) { return QuantoConfig::from_kwargs({{"weights_dtype", s}}).qtype(); }

// The case's state dict entries, keyed as the QLinear saved them (module prefix "lin").
diffq::io::StateDict case_sd(const std::string& name) {
  diffq::io::StateDict sd;
  const std::string p = name + ".sd.";
  for (const auto& [k, t] : fx())
    if (k.rfind(p, 0) == 0) sd["lin." + k.substr(p.size())] = t;
  return sd;
}

TEST(Quanto, GroupSizeRule) {
  EXPECT_EQ(quanto_group_size(8, 100), std::nullopt);  // in <= 128
  EXPECT_EQ(quanto_group_size(8, 128), std::nullopt);
  EXPECT_EQ(quanto_group_size(8, 256), 128);
  EXPECT_EQ(quanto_group_size(8, 192), 96);
  EXPECT_EQ(quanto_group_size(8, 160), 32);
  EXPECT_EQ(quanto_group_size(8, 130), std::nullopt);  // nothing in 128..32 divides it
  EXPECT_EQ(quanto_group_size(8, 3072), 128);
  EXPECT_EQ(quanto_group_size(8, 12288), 128);
  for (const auto& [name, c] : cases().items()) {
    const Tensor& w = T("in." + c["input"].get<std::string>());
    const auto g = quanto_group_size(w.shape()[0], w.shape()[1]);
    if (c["qtype"] == "int4" || c["qtype"] == "int2") {
      EXPECT_EQ(g.has_value(), !c["group_size"].is_null()) << name;
      if (g) EXPECT_EQ(*g, c["group_size"].get<int64_t>()) << name;
    }
  }
}

TEST(Quanto, QuantizeIsBitExactWithTheSavedTensors) {
  int n = 0;
  for (const auto& [name, c] : cases().items()) {
    SCOPED_TRACE(name + " (" + c["weight_class"].get<std::string>() + ")");
    const DType dt = diffq::parse_dtype(c["dtype"].get<std::string>());
    const Tensor w = T("in." + c["input"].get<std::string>()).to(dt);
    const auto q = QuantoWeight::quantize(w, qtype_of(c["qtype"].get<std::string>()), name);
    diffq::io::NamedTensors nt;
    q->save(nt, "lin");
    const auto ref = case_sd(name);
    ASSERT_EQ(nt.size(), ref.size());
    for (const auto& [k, t] : nt) {
      SCOPED_TRACE(k);
      ASSERT_TRUE(ref.count(k));
      EXPECT_EQ(t.shape(), ref.at(k).shape());
      EXPECT_TRUE(same_bytes(t, ref.at(k)));
    }
    ++n;
  }
  EXPECT_EQ(n, 48);
}

TEST(Quanto, DequantizeIsBitExact) {
  for (const auto& [name, c] : cases().items()) {
    SCOPED_TRACE(name);
    const Tensor& in = T("in." + c["input"].get<std::string>());
    const auto q = QuantoWeight::load(case_sd(name), "lin", qtype_of(c["qtype"].get<std::string>()), in.shape());
    const Tensor deq = q->dequantize(q->dtype());
    if (fx().count(name + ".deq")) {
      // float8 rows of zeros dequantize to NaN (scale 0 * NaN code); torch's NaN bit patterns depend on
      // its vector / tail paths, so NaN only has to stay NaN.
      EXPECT_TRUE(bnbtest::same_bytes_or_both_nan(deq, T(name + ".deq")));
    } else {
      EXPECT_EQ(bnbtest::sha256(deq), c["deq_sha256"].get<std::string>());
    }
  }
}

TEST(Quanto, FusedLinearEqualsDequantizePlusDenseLinear) {
  diffq::Generator g(21);
  for (auto qt : {QuantoQType::int8, QuantoQType::float8, QuantoQType::int4, QuantoQType::int2})
    for (auto [M, N, K] : {std::tuple{1, 6, 100}, {9, 40, 192}, {4, 48, 256}}) {
      const Tensor w = diffq::randn_tensor({N, K}, g, DType::f32).to(DType::bf16);
      const auto q = QuantoWeight::quantize(w, qt);
      const Tensor b = diffq::randn_tensor({N}, g, DType::f32);
      for (DType dt : {DType::f32, DType::bf16}) {
        const Tensor x = diffq::randn_tensor({M, K}, g, DType::f32).to(dt);
        const Tensor y = q->linear(x, b.to(dt));
        const Tensor ref = diffq::ops::linear(x.to(DType::f32), q->dequantize(dt).to(DType::f32), b.to(dt).to(DType::f32));
        EXPECT_EQ(y.dtype(), dt);
        EXPECT_LE(bnbtest::max_rel(y, ref), dt == DType::f32 ? 1e-5 : 8e-3) << q->scheme() << " " << M << "x" << N << "x" << K;
      }
    }
}

TEST(Quanto, DiffusersFolders) {
  const auto expected = bnbtest::read_json(root() / "diffusers" / "expected.json");
  const auto src = diffq::io::SafetensorsFile::open(bnbtest::fixtures() / "tiny-flux" / "transformer" /
                                                    "diffusion_pytorch_model.safetensors")
                       .tensors();
  for (const auto& [v, e] : expected.items()) {
    SCOPED_TRACE(v);
    const fs::path dir = root() / "diffusers" / v;
    const auto file_cfg = bnbtest::read_json(dir / "config.json")["quantization_config"];
    const auto cfg = QuantoConfig::from_kwargs(e["kwargs"]);
    EXPECT_EQ(cfg.to_json(), file_cfg);
    EXPECT_EQ(QuantoConfig::from_kwargs(file_cfg).to_json(), file_cfg);
    const auto sd = diffq::io::SafetensorsFile::open(dir / "diffusion_pytorch_model.safetensors").tensors();
    // Load: every quantized weight dequantizes to quanto's bytes.
    const auto loaded = quanto_load_state_dict(sd, cfg, [&](const std::string& wk) { return src.at(wk).shape(); });
    EXPECT_EQ(loaded.size(), e["weights"].size());
    for (const auto& [key, w] : e["weights"].items()) {
      SCOPED_TRACE(key);
      ASSERT_TRUE(loaded.count(key));
      EXPECT_EQ(loaded.at(key)->scheme(), cfg.scheme());
      const Tensor deq = loaded.at(key)->dequantize(diffq::parse_dtype(w["dtype"].get<std::string>()));
      EXPECT_EQ(bnbtest::sha256(deq), w["sha256"].get<std::string>());
      EXPECT_TRUE(cfg.should_quantize(key.substr(0, key.size() - 7)));
    }
    for (const auto& m : e["plain_linear"]) EXPECT_FALSE(cfg.should_quantize(m.get<std::string>())) << m;
    // Quantize the source: every tensor of the file, and the file's bytes.
    QuantoQuantizeOptions o;
    o.torch_dtype = diffq::parse_dtype(e["torch_dtype"].get<std::string>());
    const auto nt = quanto_quantize_state_dict(src, cfg, o);
    EXPECT_EQ(nt.size(), sd.size());
    for (const auto& [k, t] : nt) {
      SCOPED_TRACE(k);
      ASSERT_TRUE(sd.count(k));
      EXPECT_TRUE(same_bytes(t, sd.at(k)));
      EXPECT_EQ(t.shape(), sd.at(k).shape());
    }
    const auto bytes = diffq::io::serialize_safetensors(nt, diffq::io::Metadata{{"format", "pt"}});
    std::ifstream f(dir / "diffusion_pytorch_model.safetensors", std::ios::binary);
    const std::vector<uint8_t> file((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    EXPECT_TRUE(bytes == file);
  }
}

TEST(Quanto, ConfigAndSkipRules) {
  auto expect_error = [](const nlohmann::json& kw, const std::string& needle) {
    try {
      QuantoConfig::from_kwargs(kw);
      ADD_FAILURE() << "no error for " << kw.dump();
    } catch (const diffq::Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error({{"weights_dtype", "int3"}}, "Only support weights in ['float8', 'int8', 'int4', 'int2'] but found int3");
  expect_error({{"weights_dtype", "float8_e5m2"}}, "but found float8_e5m2");
  expect_error({{"modules_to_not_convert", "proj_out"}}, "modules_to_not_convert must be a list of strings");
  const auto d = QuantoConfig::from_kwargs(nlohmann::json::object());
  EXPECT_EQ(d.scheme(), "quanto_int8");  // Diffusers' default weights_dtype
  EXPECT_EQ(d.to_json(), (nlohmann::json{{"modules_to_not_convert", nullptr}, {"quant_method", "quanto"}, {"weights_dtype", "int8"}}));
  const auto c = QuantoConfig::from_kwargs({{"weights_dtype", "int4"}, {"modules_to_not_convert", {"proj_out", "attn"}}});
  EXPECT_FALSE(c.should_quantize("proj_out"));
  EXPECT_FALSE(c.should_quantize("single_transformer_blocks.0.proj_out"));
  // Only the Linear's own name counts: a listed parent does not protect its children (unlike bnb).
  EXPECT_TRUE(c.should_quantize("transformer_blocks.0.attn.to_q"));
  EXPECT_FALSE(c.should_quantize("blocks.0.norm1.linear", {"linear"}));
}

TEST(Quanto, LoadErrorsNameTheKey) {
  diffq::Generator g(2);
  const auto q = QuantoWeight::quantize(diffq::randn_tensor({20, 192}, g, DType::f32), QuantoQType::int4);
  diffq::io::NamedTensors nt;
  q->save(nt, "blk.ff");
  const diffq::io::StateDict sd(nt.begin(), nt.end());
  EXPECT_TRUE(same_bytes(QuantoWeight::load(sd, "blk.ff", QuantoQType::int4, {20, 192})->dequantize(DType::f32),
                         q->dequantize(DType::f32)));
  auto expect_error = [&](diffq::io::StateDict s, QuantoQType qt, const Shape& shape, const std::string& needle) {
    try {
      QuantoWeight::load(s, "blk.ff", qt, shape);
      ADD_FAILURE() << "no error, expected " << needle;
    } catch (const diffq::Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  {
    auto s = sd;
    s.erase("blk.ff.weight._shift");
    expect_error(s, QuantoQType::int4, {20, 192}, "the int4 weight blk.ff.weight has no 'blk.ff.weight._shift'");
  }
  expect_error(sd, QuantoQType::int4, {20, 190},
               "blk.ff.weight._data._data must be uint8 [10, 190] for a int4 weight of shape [20, 190] (one group per row)");
  expect_error(sd, QuantoQType::int2, {20, 192}, "blk.ff.weight._data._data must be uint8 [10, 96]");
  expect_error(sd, QuantoQType::int8, {20, 192}, "has no 'blk.ff.weight._data'");
  {
    auto s = sd;
    s["blk.ff.weight._scale"] = Tensor::zeros({39, 1}, DType::f32);
    expect_error(s, QuantoQType::int4, {20, 192}, "blk.ff.weight._scale must be [40, 1]");
  }
  EXPECT_THROW(QuantoWeight::quantize(Tensor::zeros({4, 8}, DType::i32), QuantoQType::int8), diffq::Error);
  EXPECT_THROW(QuantoWeight::quantize(Tensor::zeros({1, 8}, DType::f32), QuantoQType::int4), diffq::Error);
  EXPECT_THROW(q->linear(Tensor::zeros({2, 191}, DType::f32), {}), diffq::Error);
}

}  // namespace
