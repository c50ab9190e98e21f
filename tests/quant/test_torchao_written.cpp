// The reverse direction: files written by our save() must load in Diffusers/torchao.
// tests/fixtures/quant/torchao/written/ holds, per config, "<name>.safetensors" (our layout and metadata)
// and "<name>.config.json" (our Config::to_json()), plus "source.safetensors" (the bf16 weights they were
// quantized from). tools/reference/check_torchao_written.py loads them with torchao's
// unflatten_tensor_state_dict (what Diffusers' loader calls), requantizes the source with torchao, compares,
// and commits check_result.json with "ok" and every file's sha256. These tests (1) regenerate the files
// in memory and require the committed bytes to be exactly ours, (2) require the committed check result
// to be "ok" for the files' current sha256. Set DIFFQ_WRITE_TORCHAO_FIXTURES=1 to rewrite the files.
#include <gtest/gtest.h>

#include "common/sha256.h"

#include <array>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "quant/torchao/torchao.h"

namespace {

using namespace diffq;
namespace tao = diffq::quant::torchao;
namespace fs = std::filesystem;

fs::path dir() { return fs::path(DIFFQ_SOURCE_DIR) / "tests/fixtures/quant/torchao/written"; }

using diffq::testing::sha256_hex;

std::vector<uint8_t> read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

// Deterministic bf16 weights (an LCG, no libm), with an all-zero row and an outlier.
Tensor make_weight(int64_t n, int64_t k, uint32_t seed) {
  std::vector<float> v(size_t(n * k));
  uint32_t s = seed;
  for (auto& x : v) {
    s = s * 1664525u + 1013904223u;
    x = (float(s >> 8) / float(1u << 24) - 0.5f) * 0.1f;
  }
  if (n > 1) {
    for (int64_t c = 0; c < k; ++c) v[size_t(c)] = 0.0f;
    v[size_t(k + 5)] = 3.0f;
  }
  return Tensor::from_vector(v, {n, k}, DType::bf16);
}

const std::vector<std::pair<std::string, std::string>>& configs() {
  static const std::vector<std::pair<std::string, std::string>> c = {
      {"int8wo", R"({"_type": "Int8WeightOnlyConfig", "_data": {}})"},
      {"int8dq", R"({"_type": "Int8DynamicActivationInt8WeightConfig", "_data": {}})"},
      {"int4wo_g32", R"({"_type": "Int4WeightOnlyConfig", "_data": {"group_size": 32}})"},
      {"float8wo", R"({"_type": "Float8WeightOnlyConfig", "_data": {}})"},
      {"float8dq_row", R"({"quant_type": "float8dq_e4m3_row"})"},
      {"intx_int4_g16", R"({"_type": "IntxWeightOnlyConfig", "_data": {"weight_dtype": "int4", "granularity": {"_type": "PerGroup", "_data": {"group_size": 16}}}})"},
  };
  return c;
}

struct Written {
  std::map<std::string, std::vector<uint8_t>> files;  // name -> bytes
};

Written build_files() {
  Written w;
  io::StateDict source;
  source["blocks.0.lin.weight"] = make_weight(32, 64, 1);
  source["blocks.1.lin.weight"] = make_weight(16, 64, 2);
  source["blocks.0.lin.bias"] = make_weight(1, 32, 3).view({32});
  source["blocks.1.lin.bias"] = make_weight(1, 16, 4).view({16});
  source["norm.weight"] = make_weight(1, 64, 5).view({64});
  w.files["source.safetensors"] = io::serialize_safetensors(io::NamedTensors(source.begin(), source.end()));
  for (auto& [name, text] : configs()) {
    const tao::Config cfg = tao::Config::from_json(nlohmann::json::parse(text));
    io::StateDict out;
    io::Metadata md;
    for (auto& [key, t] : source) {
      const std::string mod = key.substr(0, key.rfind('.'));
      const bool lin_weight = key.size() > 7 && key.compare(key.size() - 7, 7, ".weight") == 0 && t.dim() == 2;
      if (lin_weight && tao::should_quantize(mod, t.shape(), cfg))
        tao::save(*tao::quantize(t, cfg), mod, out, &md);
      else
        out[key] = t;
    }
    tao::finish_metadata(out, md);
    w.files[name + ".safetensors"] = io::serialize_safetensors(io::NamedTensors(out.begin(), out.end()), md);
    const std::string cj = cfg.to_json().dump(2) + "\n";
    w.files[name + ".config.json"] = std::vector<uint8_t>(cj.begin(), cj.end());
  }
  return w;
}

TEST(TorchaoWritten, CommittedFilesAreWhatSaveWrites) {
  const Written w = build_files();
  if (const char* e = std::getenv("DIFFQ_WRITE_TORCHAO_FIXTURES"); e && std::string(e) == "1") {
    fs::create_directories(dir());
    for (auto& [name, bytes] : w.files) {
      std::ofstream out(dir() / name, std::ios::binary);
      out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
    }
  }
  for (auto& [name, bytes] : w.files) {
    ASSERT_TRUE(fs::exists(dir() / name)) << name << " (run with DIFFQ_WRITE_TORCHAO_FIXTURES=1)";
    EXPECT_TRUE(read_bytes(dir() / name) == bytes) << name << " differs from what save() writes now";
  }
}

TEST(TorchaoWritten, TorchaoCheckedTheCurrentFiles) {
  std::ifstream in(dir() / "check_result.json");
  ASSERT_TRUE(in.good()) << "run tools/reference/check_torchao_written.py";
  const nlohmann::json r = nlohmann::json::parse(in);
  EXPECT_TRUE(r["ok"].get<bool>()) << r.dump(2);
  size_t n = 0;
  for (auto& [name, _] : build_files().files) {
    if (name == "source.safetensors" || name.find(".safetensors") == std::string::npos) continue;
    ASSERT_TRUE(r["files"].contains(name)) << name;
    EXPECT_EQ(r["files"][name]["sha256"].get<std::string>(), sha256_hex(read_bytes(dir() / name))) << name;
    EXPECT_TRUE(r["files"][name]["ok"].get<bool>()) << name;
    ++n;
  }
  EXPECT_EQ(n, configs().size());
  EXPECT_EQ(sha256_hex({'a', 'b', 'c'}), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

}  // namespace
