// A tiny FluxTransformer2DModel quantized by Diffusers' TorchAoConfig and written by save_pretrained
// (safetensors: "<mod>._weight_<attr>" tensors + "tensor_names" metadata): every weight loads, its
// dequantization equals torchao's dequantize() bytes (FNV-1a 64 in expected.json), plain tensors are
// untouched, and should_quantize reproduces which Linear weights Diffusers/torchao left unquantized.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "quant/torchao/torchao.h"

namespace {

using namespace diffq;
namespace tao = diffq::quant::torchao;
namespace fs = std::filesystem;

fs::path root() { return fs::path(DIFFQ_SOURCE_DIR) / "tests/fixtures/quant/torchao/diffusers"; }

nlohmann::json read_json(const fs::path& p) {
  std::ifstream in(p);
  return nlohmann::json::parse(in);
}

std::string fnv1a64(const Tensor& t) {
  const Tensor c = t.contiguous();
  const auto* p = static_cast<const uint8_t*>(c.data_ptr());
  uint64_t h = 0xCBF29CE484222325ull;
  for (size_t i = 0; i < c.nbytes(); ++i) {
    h ^= p[i];
    h *= 0x100000001B3ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

TEST(TorchaoDiffusersFile, EveryWeightLoadsAndDequantizesLikeTorchao) {
  const nlohmann::json expected = read_json(root() / "expected.json");
  ASSERT_GE(expected.size(), 5u);
  for (auto& [name, e] : expected.items()) {
    SCOPED_TRACE(name);
    const fs::path dir = root() / name / "transformer";
    const nlohmann::json config = read_json(dir / "config.json");
    const tao::Config cfg = tao::Config::from_json(config["quantization_config"]);
    EXPECT_EQ(cfg.to_json()["quant_type"], config["quantization_config"]["quant_type"]);  // round trip
    const io::SafetensorsFile f = io::SafetensorsFile::open(dir / e["files"][0].get<std::string>());
    const io::Metadata& md = f.metadata();
    ASSERT_TRUE(md.count("tensor_names"));
    const io::StateDict sd = f.tensors();
    int quantized = 0, plain = 0;
    for (auto& [key, k] : e["keys"].items()) {
      SCOPED_TRACE(key);
      const std::string cls = k["class"];
      const Shape shape = k["shape"].get<Shape>();
      const std::string module = key.substr(0, key.rfind('.'));
      if (cls == "Tensor" || cls == "Parameter") {
        ASSERT_TRUE(sd.count(key));
        EXPECT_EQ(fnv1a64(sd.at(key)), k["fnv1a64"].get<std::string>());
        // A 2-D plain ".weight" is a Linear the config skipped.
        if (shape.size() == 2 && key.size() > 7 && key.compare(key.size() - 7, 7, ".weight") == 0)
          EXPECT_FALSE(tao::should_quantize(module, shape, cfg));
        ++plain;
        continue;
      }
      EXPECT_TRUE(tao::should_quantize(module, shape, cfg));
      auto w = tao::load(sd, module, shape, cfg, &md);
      auto* tw = dynamic_cast<const tao::TorchaoWeight*>(w.get());
      ASSERT_NE(tw, nullptr);
      EXPECT_EQ(tw->tensor_class(), cls);
      const DType dt = parse_dtype(k["dtype"].get<std::string>());
      EXPECT_EQ(fnv1a64(w->dequantize(dt)), k["fnv1a64"].get<std::string>());
      // Saving it again gives the same tensors and the same metadata JSON (as parsed).
      tao::StateDict out;
      tao::Metadata md2;
      tao::save(*w, module, out, &md2);
      for (auto& [okey, t] : out) EXPECT_EQ(fnv1a64(t), fnv1a64(sd.at(okey))) << okey;
      EXPECT_EQ(nlohmann::json::parse(md2.at(key)), nlohmann::json::parse(md.at(key)));
      ++quantized;
    }
    EXPECT_GT(quantized, 10);
    EXPECT_GT(plain, 10);
  }
}

TEST(TorchaoDiffusersFile, FinishMetadataListsEveryKeyLikeTorchao) {
  const fs::path dir = root() / "int8wo" / "transformer";
  const io::SafetensorsFile f = io::SafetensorsFile::open(dir / "diffusion_pytorch_model.safetensors");
  io::Metadata md;
  for (auto& [k, v] : f.metadata())
    if (k.find("._weight_") == std::string::npos && k != "tensor_names" && k != "format") {
      const auto j = nlohmann::json::parse(v);
      if (j["_type"] != "Tensor") md[k] = v;  // keep only the quantized entries, rebuild the rest
    }
  tao::finish_metadata(f.tensors(), md);
  const auto want = nlohmann::json::parse(f.metadata().at("tensor_names")).get<std::vector<std::string>>();
  auto got = nlohmann::json::parse(md.at("tensor_names")).get<std::vector<std::string>>();
  std::vector<std::string> w = want;
  std::sort(w.begin(), w.end());
  EXPECT_EQ(got, w);
  for (auto& [k, v] : f.metadata()) {
    ASSERT_TRUE(md.count(k)) << k;
    if (k == "tensor_names") continue;  // same set, checked above (Diffusers lists them in module order)
    if (k == "format") {
      EXPECT_EQ(md.at(k), v);
      continue;
    }
    EXPECT_EQ(nlohmann::json::parse(md.at(k)), nlohmann::json::parse(v)) << k;
  }
}

}  // namespace
