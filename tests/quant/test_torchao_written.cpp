// The reverse direction: files written by our save() must load in Diffusers/torchao.
// tests/fixtures/quant/torchao/written/ holds, per config, "<name>.safetensors" (our layout and metadata)
// and "<name>.config.json" (our Config::to_json()), plus "source.safetensors" (the bf16 weights they were
// quantized from). tools/reference/check_torchao_written.py loads them with torchao's
// unflatten_tensor_state_dict (what Diffusers' loader calls), requantizes the source with torchao, compares,
// and commits check_result.json with "ok" and every file's sha256. These tests (1) regenerate the files
// in memory and require the committed bytes to be exactly ours, (2) require the committed check result
// to be "ok" for the files' current sha256. Set DIFFQ_WRITE_TORCHAO_FIXTURES=1 to rewrite the files.
#include <gtest/gtest.h>

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

// ---- SHA-256 (FIPS 180-4), for comparing with Python's hashlib ------------------------------------
std::string sha256_hex(const std::vector<uint8_t>& data) {
  static const uint32_t k[64] = {
      0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5, 0xd807aa98,
      0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
      0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8,
      0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
      0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819,
      0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
      0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
      0xc67178f2};
  uint32_t h[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  std::vector<uint8_t> m = data;
  const uint64_t bits = uint64_t(data.size()) * 8;
  m.push_back(0x80);
  while (m.size() % 64 != 56) m.push_back(0);
  for (int i = 7; i >= 0; --i) m.push_back(uint8_t(bits >> (8 * i)));
  auto rotr = [](uint32_t x, int n) { return (x >> n) | (x << (32 - n)); };
  for (size_t off = 0; off < m.size(); off += 64) {
    uint32_t w[64];
    for (int i = 0; i < 16; ++i)
      w[i] = uint32_t(m[off + 4 * i]) << 24 | uint32_t(m[off + 4 * i + 1]) << 16 | uint32_t(m[off + 4 * i + 2]) << 8 |
             m[off + 4 * i + 3];
    for (int i = 16; i < 64; ++i) {
      const uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
      const uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
      w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7];
    for (int i = 0; i < 64; ++i) {
      const uint32_t t1 = hh + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + k[i] + w[i];
      const uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
      hh = g, g = f, f = e, e = d + t1, d = c, c = b, b = a, a = t1 + t2;
    }
    h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e, h[5] += f, h[6] += g, h[7] += hh;
  }
  char out[65];
  for (int i = 0; i < 8; ++i) std::snprintf(out + 8 * i, 9, "%08x", h[i]);
  return out;
}

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
