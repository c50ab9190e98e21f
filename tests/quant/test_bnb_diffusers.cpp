// Diffusers + bitsandbytes checkpoints (tests/fixtures/quant/bnb/diffusers/: tiny-flux's transformer
// quantized by from_pretrained(quantization_config=BitsAndBytesConfig(...)) and saved by save_pretrained):
// every quantized weight loads and dequantizes to bitsandbytes' bytes, diffq's quantization of the
// same source weights reproduces every tensor of the file, and the config round-trips.
//
// The reverse direction: tests/fixtures/quant/bnb/written/<variant>/ holds the folders diffq writes
// (config.json + diffusion_pytorch_model.safetensors), checked by tools/reference/check_bnb_written.py
// with Diffusers / bitsandbytes; its result (written/check_result.json) carries the sha256 of the files
// it checked. This test regenerates the files in memory and requires the same sha256, so a writer
// change that was not re-checked fails. DIFFQ_WRITE_BNB_FIXTURES=1 rewrites the files (then re-run the
// checker).
#include <gtest/gtest.h>

#include <cstdlib>

#include "diffq/error.h"
#include "quant/bnb/bnb_4bit.h"
#include "quant/bnb/bnb_int8.h"
#include "quant/bnb/bnb_state_dict.h"
#include "test_bnb_common.h"

namespace {

using diffq::DType;
using diffq::Tensor;
using namespace diffq::quant;
namespace fs = std::filesystem;
using bnbtest::same_bytes;

fs::path root() { return bnbtest::fixtures() / "quant" / "bnb"; }
fs::path source_dir() { return bnbtest::fixtures() / "tiny-flux" / "transformer"; }
const nlohmann::json& expected() {
  static const auto j = bnbtest::read_json(root() / "diffusers" / "expected.json");
  return j;
}
int lanes() { return bnbtest::read_json(root() / "cases.json")["torch_sum_lanes"].get<int>(); }

std::vector<uint8_t> read_bytes(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

// The folder diffq writes for a variant: source config + quantization_config, and the quantized
// state dict in safetensors (metadata {"format": "pt"} as save_pretrained writes).
struct Written {
  std::string config;
  std::vector<uint8_t> weights;
};

Written write_variant(const std::string& v) {
  const auto& e = expected()[v];
  const auto cfg = BitsAndBytesConfig::from_kwargs(e["kwargs"]);
  BnbQuantizeOptions o;
  o.torch_dtype = diffq::parse_dtype(e["torch_dtype"].get<std::string>());
  o.sum_lanes = lanes();
  const auto src = diffq::io::SafetensorsFile::open(source_dir() / "diffusion_pytorch_model.safetensors").tensors();
  const auto nt = bnb_quantize_state_dict(src, cfg, o);
  Written w;
  w.weights = diffq::io::serialize_safetensors(nt, diffq::io::Metadata{{"format", "pt"}});
  nlohmann::json c = bnbtest::read_json(source_dir() / "config.json");
  c["quantization_config"] = cfg.to_json();
  c["_name_or_path"] = "tests/fixtures/tiny-flux/transformer";  // what from_pretrained was given
  w.config = c.dump(2) + "\n";
  return w;
}

TEST(BnbDiffusers, ConfigRoundTrips) {
  for (const auto& [v, e] : expected().items()) {
    SCOPED_TRACE(v);
    const auto file = bnbtest::read_json(root() / "diffusers" / v / "config.json");
    const auto& qc = file["quantization_config"];
    EXPECT_EQ(BitsAndBytesConfig::from_kwargs(qc).to_json(), qc);
    EXPECT_EQ(BitsAndBytesConfig::from_kwargs(e["kwargs"]).to_json(), qc);
  }
}

TEST(BnbDiffusers, EveryQuantizedWeightDequantizesToBitsandbytesBytes) {
  for (const auto& [v, e] : expected().items()) {
    SCOPED_TRACE(v);
    const auto sd =
        diffq::io::SafetensorsFile::open(root() / "diffusers" / v / "diffusion_pytorch_model.safetensors").tensors();
    const auto cfg = BitsAndBytesConfig::from_kwargs(e["kwargs"]);
    const auto loaded = bnb_load_state_dict(sd, cfg);
    EXPECT_EQ(loaded.size(), e["weights"].size());
    for (const auto& [key, w] : e["weights"].items()) {
      SCOPED_TRACE(key);
      ASSERT_TRUE(loaded.count(key));
      const auto& q = *loaded.at(key);
      EXPECT_EQ(q.scheme(), cfg.scheme());
      EXPECT_EQ(q.shape(), (w["shape"].get<diffq::Shape>()));
      const Tensor deq = q.dequantize(diffq::parse_dtype(w["dtype"].get<std::string>()));
      EXPECT_EQ(bnbtest::sha256(deq), w["sha256"].get<std::string>());
    }
    for (const auto& m : e["plain_linear"]) {
      const std::string key = m.get<std::string>() + ".weight";
      EXPECT_FALSE(loaded.count(key)) << key;
      EXPECT_FALSE(cfg.should_quantize(m.get<std::string>())) << key;
      EXPECT_EQ(sd.at(key).dtype(), diffq::parse_dtype(e["torch_dtype"].get<std::string>()));
    }
    for (const auto& [key, w] : e["weights"].items()) {
      const std::string module = key.substr(0, key.size() - 7);
      EXPECT_TRUE(cfg.should_quantize(module)) << module;
    }
  }
}

TEST(BnbDiffusers, QuantizingTheSourceReproducesTheFile) {
  for (const auto& [v, e] : expected().items()) {
    SCOPED_TRACE(v);
    const fs::path file = root() / "diffusers" / v / "diffusion_pytorch_model.safetensors";
    const auto sd = diffq::io::SafetensorsFile::open(file).tensors();
    const Written w = write_variant(v);
    diffq::io::StateDict mine;
    {
      const fs::path tmp = fs::temp_directory_path() / ("diffq_bnb_" + v + "_" + std::to_string(::getpid()) + ".st");
      std::ofstream(tmp, std::ios::binary).write(reinterpret_cast<const char*>(w.weights.data()), std::streamsize(w.weights.size()));
      const auto f = diffq::io::SafetensorsFile::open(tmp);
      for (const auto& [k, t] : f.tensors()) mine[k] = t.clone();
      fs::remove(tmp);
    }
    EXPECT_EQ(mine.size(), sd.size());
    for (const auto& [k, t] : sd) {
      SCOPED_TRACE(k);
      ASSERT_TRUE(mine.count(k));
      EXPECT_EQ(mine.at(k).shape(), t.shape());
      EXPECT_TRUE(same_bytes(mine.at(k), t));
    }
    // Byte for byte the file save_pretrained wrote.
    EXPECT_TRUE(w.weights == read_bytes(file));
    EXPECT_EQ(nlohmann::json::parse(w.config), bnbtest::read_json(root() / "diffusers" / v / "config.json"));
    const auto cfg_bytes = read_bytes(root() / "diffusers" / v / "config.json");
    EXPECT_EQ(w.config, std::string(cfg_bytes.begin(), cfg_bytes.end()));  // Diffusers' text, byte for byte
  }
}

TEST(BnbWritten, CommittedFilesAreTheCheckedOnes) {
  const fs::path dir = root() / "written";
  const bool write = std::getenv("DIFFQ_WRITE_BNB_FIXTURES") != nullptr;
  nlohmann::json result;
  if (!write) {
    ASSERT_TRUE(fs::exists(dir / "check_result.json")) << "run tools/reference/check_bnb_written.py";
    result = bnbtest::read_json(dir / "check_result.json");
    EXPECT_TRUE(result["ok"].get<bool>()) << result.dump(2);
  }
  for (const auto& [v, e] : expected().items()) {
    SCOPED_TRACE(v);
    const Written w = write_variant(v);
    const std::string sha_w = bnbtest::sha256(w.weights), sha_c = bnbtest::sha256(w.config.data(), w.config.size());
    const fs::path vd = dir / v;
    if (write) {
      fs::create_directories(vd);
      std::ofstream(vd / "diffusion_pytorch_model.safetensors", std::ios::binary)
          .write(reinterpret_cast<const char*>(w.weights.data()), std::streamsize(w.weights.size()));
      std::ofstream(vd / "config.json", std::ios::binary) << w.config;
      continue;
    }
    EXPECT_EQ(bnbtest::sha256_file(vd / "diffusion_pytorch_model.safetensors"), sha_w)
        << "the committed file is not what the writer produces now: rerun with DIFFQ_WRITE_BNB_FIXTURES=1 and "
           "tools/reference/check_bnb_written.py";
    EXPECT_EQ(bnbtest::sha256_file(vd / "config.json"), sha_c);
    const auto& files = result["variants"][v]["files"];
    EXPECT_EQ(files["diffusion_pytorch_model.safetensors"].get<std::string>(), sha_w)
        << "the writer changed since check_bnb_written.py checked it";
    EXPECT_EQ(files["config.json"].get<std::string>(), sha_c);
    EXPECT_TRUE(result["variants"][v]["ok"].get<bool>());
  }
}

TEST(BnbDiffusers, SkipRules) {
  auto cfg = BitsAndBytesConfig::from_kwargs({{"load_in_4bit", true}, {"llm_int8_skip_modules", {"proj_out", "norm_out", "attn"}}});
  EXPECT_FALSE(cfg.should_quantize("proj_out"));                              // own name
  EXPECT_FALSE(cfg.should_quantize("norm_out.linear"));                       // "norm_out." in the name
  EXPECT_FALSE(cfg.should_quantize("transformer_blocks.0.attn.to_q"));        // "attn." in the name
  EXPECT_TRUE(cfg.should_quantize("transformer_blocks.0.ff.net.2"));
  EXPECT_TRUE(cfg.should_quantize("single_transformer_blocks.0.proj_out_x"));  // not "proj_out" exactly
  EXPECT_FALSE(cfg.should_quantize("blocks.0.norm1.linear", {"norm1"}));      // keep_in_fp32 extends the list
  // Substring semantics, as Diffusers: "0" skips every module whose dotted name contains "0.".
  EXPECT_TRUE(bnb_module_skipped("blocks.10.ff", {"0"}));  // "0." occurs in "blocks.10.ff"
  EXPECT_FALSE(bnb_module_skipped("blocks.1.ff", {"0"}));

  // keep_in_fp32 modules stay dense float32 (Diffusers: a dotted component equal to an entry), the
  // others are quantized or cast to torch_dtype.
  diffq::io::StateDict sd;
  sd["blocks.0.norm1.linear.weight"] = Tensor::full({4, 64}, 0.5, DType::f32);
  sd["blocks.0.norm1.linear.bias"] = Tensor::full({4}, 0.5, DType::f32);
  sd["blocks.0.ff.weight"] = Tensor::full({4, 64}, 0.5, DType::f32);
  sd["blocks.0.ff.bias"] = Tensor::full({4}, 0.5, DType::f32);
  sd["blocks.0.norm1x.weight"] = Tensor::full({4}, 0.5, DType::f32);
  BnbQuantizeOptions o;
  o.torch_dtype = DType::bf16;
  o.keep_in_fp32 = {"norm1"};
  const auto nt = bnb_quantize_state_dict(sd, BitsAndBytesConfig::from_kwargs({{"load_in_4bit", true}}), o);
  std::map<std::string, Tensor> m(nt.begin(), nt.end());
  EXPECT_EQ(m.at("blocks.0.norm1.linear.weight").dtype(), DType::f32);
  EXPECT_EQ(m.at("blocks.0.norm1.linear.bias").dtype(), DType::f32);
  EXPECT_EQ(m.at("blocks.0.ff.weight").dtype(), DType::u8);
  EXPECT_TRUE(m.count("blocks.0.ff.weight.quant_state.bitsandbytes__fp4"));
  EXPECT_EQ(m.at("blocks.0.ff.bias").dtype(), DType::bf16);
  EXPECT_EQ(m.at("blocks.0.norm1x.weight").dtype(), DType::bf16);
}

TEST(BnbDiffusers, ConfigErrors) {
  auto expect_error = [](const nlohmann::json& kw, const std::string& needle) {
    try {
      BitsAndBytesConfig::from_kwargs(kw);
      ADD_FAILURE() << "no error for " << kw.dump();
    } catch (const diffq::Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error({{"load_in_4bit", true}, {"load_in_8bit", true}},
               "load_in_4bit and load_in_8bit are both True, but only one can be used at the same time");
  expect_error({{"load_in_4bit", true}, {"bnb_4bit_quant_type", "int4"}}, "quant_type must be 'nf4' or 'fp4', got 'int4'");
  expect_error({{"load_in_4bit", 1}}, "load_in_4bit must be a boolean");
  expect_error({{"llm_int8_threshold", 6}}, "llm_int8_threshold must be a float");
  expect_error({{"llm_int8_skip_modules", "proj_out"}}, "llm_int8_skip_modules must be a list of strings");
  expect_error({{"bnb_4bit_compute_dtype", 16}}, "bnb_4bit_compute_dtype must be a string or a torch.dtype");
  expect_error({{"bnb_4bit_compute_dtype", "int8"}}, "is not a float dtype");
  expect_error({{"bnb_4bit_quant_storage", "int4"}}, "`bnb_4bit_quant_storage` must be a valid string");
  expect_error({{"bnb_4bit_use_double_quant", "yes"}}, "bnb_4bit_use_double_quant must be a boolean");
  expect_error({{"bnb_4bit_quant_type", 4}}, "bnb_4bit_quant_type must be a string");

  const auto c = BitsAndBytesConfig::from_kwargs({{"load_in_4bit", true}, {"bnb_4bit_compute_dtype", "torch.bfloat16"},
                                                  {"not_a_key", 1}});
  EXPECT_EQ(c.bnb_4bit_compute_dtype, DType::bf16);
  EXPECT_EQ(c.unused_kwargs, std::vector<std::string>{"not_a_key"});
  EXPECT_EQ(c.scheme(), "bnb_fp4");
  EXPECT_THROW(BitsAndBytesConfig::from_kwargs(nlohmann::json::object()).scheme(), diffq::Error);
  EXPECT_THROW(Bnb4bitOptions::from_config(BitsAndBytesConfig::from_kwargs({{"load_in_8bit", true}})), diffq::Error);
  EXPECT_THROW(Bnb4bitOptions::from_config(
                   BitsAndBytesConfig::from_kwargs({{"load_in_4bit", true}, {"bnb_4bit_quant_storage", "float64"}})),
               diffq::Error);
}

TEST(BnbDiffusers, MissingQuantStateIsNamed) {
  auto sd = diffq::io::SafetensorsFile::open(root() / "diffusers" / "nf4_dq_bf16" / "diffusion_pytorch_model.safetensors")
                .tensors();
  sd.erase("context_embedder.weight.quant_state.bitsandbytes__nf4");
  try {
    bnb_load_state_dict(sd, BitsAndBytesConfig::from_kwargs({{"load_in_4bit", true}, {"bnb_4bit_quant_type", "nf4"}}));
    FAIL();
  } catch (const diffq::Error& e) {
    EXPECT_NE(std::string(e.what()).find("Supplied state dict for context_embedder.weight does not contain `bitsandbytes__*`"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
