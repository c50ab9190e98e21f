// `--transformer FILE.bin`: a torch.save'd FLUX transformer state dict (Diffusers or BFL naming) goes
// through the same single-file loader as a .safetensors and generates exactly the same latents.
// The .bin is rebuilt from tests/fixtures/torch-bin/flux_single_file_<naming>.{json,pkl}: torch.save's own
// data.pkl and entry list, the storages' bytes taken from the safetensors file the state dict came from
// (tools/reference/make_torch_bin.py checked that torch.load of exactly these bytes gives the state dict
// back; the sha256 below ties this rebuild to that file).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_test_util.h"
#include "common/sha256.h"
#include "io/safetensors.h"

namespace {

namespace fs = std::filesystem;
using diffq::testing::run_cli;

const fs::path kFix = fs::path(DIFFQ_SOURCE_DIR) / "tests" / "fixtures";
const std::string kTiny = (kFix / "tiny-flux").string();

uint32_t crc32(const std::vector<uint8_t>& d) {
  uint32_t c = 0xFFFFFFFFu;
  for (uint8_t b : d) {
    c ^= b;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
  }
  return ~c;
}

void put16(std::vector<uint8_t>& o, uint32_t v) {
  o.push_back(uint8_t(v));
  o.push_back(uint8_t(v >> 8));
}
void put32(std::vector<uint8_t>& o, uint32_t v) {
  put16(o, v & 0xFFFF);
  put16(o, v >> 16);
}

// make_torch_bin.py's rebuild(): stored entries, CRC-32, data padded to 64-byte offsets by an 'FB' extra field.
std::vector<uint8_t> rebuild(const std::vector<std::pair<std::string, std::vector<uint8_t>>>& entries) {
  std::vector<uint8_t> out, central;
  for (const auto& [name, data] : entries) {
    const uint32_t crc = crc32(data), off = uint32_t(out.size());
    const size_t base = off + 30 + name.size() + 4;
    const uint32_t pad = uint32_t((64 - base % 64) % 64);
    put32(out, 0x04034B50), put16(out, 20), put16(out, 0), put16(out, 0), put16(out, 0), put16(out, 0);
    put32(out, crc), put32(out, uint32_t(data.size())), put32(out, uint32_t(data.size()));
    put16(out, uint32_t(name.size())), put16(out, 4 + pad);
    out.insert(out.end(), name.begin(), name.end());
    put16(out, 0x4246), put16(out, pad);
    out.insert(out.end(), pad, uint8_t('Z'));
    out.insert(out.end(), data.begin(), data.end());
    put32(central, 0x02014B50), put16(central, 20), put16(central, 20), put16(central, 0), put16(central, 0);
    put16(central, 0), put16(central, 0), put32(central, crc), put32(central, uint32_t(data.size()));
    put32(central, uint32_t(data.size())), put16(central, uint32_t(name.size()));
    for (int i = 0; i < 4; ++i) put16(central, 0);  // extra, comment, disk, internal attributes
    put32(central, 0), put32(central, off);
    central.insert(central.end(), name.begin(), name.end());
  }
  const uint32_t cd = uint32_t(out.size());
  out.insert(out.end(), central.begin(), central.end());
  put32(out, 0x06054B50), put16(out, 0), put16(out, 0), put16(out, uint32_t(entries.size()));
  put16(out, uint32_t(entries.size())), put32(out, uint32_t(central.size())), put32(out, cd), put16(out, 0);
  return out;
}

std::vector<uint8_t> read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

// Writes the .bin of `naming` into `dir`; returns its path and the safetensors it came from.
std::pair<fs::path, fs::path> rebuild_bin(const fs::path& dir, const std::string& naming) {
  const fs::path base = kFix / "torch-bin";
  std::ifstream jin(base / ("flux_single_file_" + naming + ".json"));
  const auto recipe = nlohmann::json::parse(jin);
  const fs::path st = kFix / recipe.at("source").get<std::string>();
  const auto file = diffq::io::SafetensorsFile::open(st);
  std::vector<std::pair<std::string, std::vector<uint8_t>>> entries;
  for (const auto& e : recipe.at("entries")) {
    std::vector<uint8_t> data;
    if (e.contains("file")) {
      data = read_bytes(base / e.at("file").get<std::string>());
    } else if (e.contains("tensor")) {
      const diffq::Tensor t = file.tensor(e.at("tensor").get<std::string>()).contiguous();
      const auto* p = static_cast<const uint8_t*>(t.data_ptr());
      data.assign(p, p + t.nbytes());
    } else {
      const std::string s = e.at("text");
      data.assign(s.begin(), s.end());
    }
    entries.emplace_back(e.at("name").get<std::string>(), std::move(data));
  }
  const auto bytes = rebuild(entries);
  const fs::path out = dir / ("flux-" + naming + ".bin");
  std::ofstream(out, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  EXPECT_EQ(diffq::testing::sha256_file(out), recipe.at("sha256").get<std::string>()) << naming;
  return {out, st};
}

TEST(CliSingleFileBin, GeneratesWhatTheSafetensorsGives) {
  const fs::path dir = fs::temp_directory_path() / "diffq-cli-single-file-bin";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string gen = "generate -m '" + kTiny + "' -p 'a red fox' --steps 2 --width 32 --height 32 --output-type latent --dtype float32 ";
  for (const std::string naming : {"diffusers", "bfl"}) {
    SCOPED_TRACE(naming);
    const auto [bin, st] = rebuild_bin(dir, naming);
    const auto a = run_cli(dir, gen + "--transformer '" + bin.string() + "' -o bin.safetensors");
    ASSERT_EQ(a.status, 0) << a.out;
    const auto b = run_cli(dir, gen + "--transformer '" + st.string() + "' -o st.safetensors");
    ASSERT_EQ(b.status, 0) << b.out;
    const auto x = diffq::io::SafetensorsFile::open(dir / "bin.safetensors").tensor("latents").to_f32_vector();
    const auto y = diffq::io::SafetensorsFile::open(dir / "st.safetensors").tensor("latents").to_f32_vector();
    ASSERT_EQ(x.size(), y.size());
    EXPECT_EQ(std::memcmp(x.data(), y.data(), x.size() * 4), 0);
  }
  // A torchao-quantized .bin is a folder component, not a single file: a clear error.
  const auto r = run_cli(dir, gen + "--transformer '" +
                                  (kFix / "torch-bin/flux-int8wo/transformer/diffusion_pytorch_model.bin").string() +
                                  "' -o x.safetensors");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("torchao-quantized"), std::string::npos) << r.out;
  fs::remove_all(dir);
}

}  // namespace
