// io::write_gguf: round trip through io::GGUFFile, alignment, validation errors, atomicity, and the
// committed diffq-written file that gguf-py's GGUFReader checked (written_check.json).
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <random>

#include "diffq/error.h"
#include "gguf_test_util.h"
#include "gguf_written_recipe.h"
#include "io/gguf.h"
#include "io/gguf_writer.h"
#include "gguf_sha256.h"

namespace {

using namespace diffq;
using namespace diffq::io;
using diffq::quant::gguf::GGMLType;
namespace fs = std::filesystem;
namespace qt = diffq::quant::gguf::testing;

struct TmpDir {
  fs::path p;
  TmpDir() {
    std::random_device rd;
    p = fs::temp_directory_path() / ("diffq_gguf_wr_" + std::to_string(rd()) + std::to_string(::getpid()));
    fs::create_directories(p);
  }
  ~TmpDir() {
    std::error_code ec;
    fs::remove_all(p, ec);
  }
  size_t entries() const { return size_t(std::distance(fs::directory_iterator(p), fs::directory_iterator())); }
};

std::vector<uint8_t> read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

template <class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(GGUFWriter, RoundTripThroughTheReader) {
  TmpDir tmp;
  const auto md = qt::recipe_metadata();
  const auto tensors = qt::recipe_tensors();
  const fs::path path = tmp.p / "rt.gguf";
  write_gguf(path, md, tensors);
  EXPECT_EQ(tmp.entries(), 1u);  // no temporary left behind
  const GGUFFile f = GGUFFile::open(path);
  EXPECT_EQ(f.header().version, 3u);
  EXPECT_EQ(f.header().alignment, 64u);
  EXPECT_EQ(f.header().data_offset % 64, 0u);
  ASSERT_EQ(f.header().kv.size(), md.size());
  for (size_t i = 0; i < md.size(); ++i) {
    SCOPED_TRACE(md[i].first);
    EXPECT_EQ(f.header().kv[i].first, md[i].first);
    EXPECT_EQ(f.header().kv[i].second.type, md[i].second.type);
    EXPECT_EQ(f.header().kv[i].second.to_json(), md[i].second.to_json());
  }
  EXPECT_EQ(f.find("test.u64")->as_uint(), 9223372036854775813ull);
  EXPECT_EQ(f.find("test.string")->as_string(), "h\xc3\xa9llo \xe2\x9c\x93");
  EXPECT_FLOAT_EQ(float(f.find("test.f32")->f), 0.1f);
  ASSERT_EQ(f.tensors().size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& t = tensors[i];
    SCOPED_TRACE(t.name);
    const GGUFTensorInfo& info = f.tensors()[i];
    EXPECT_EQ(info.name, t.name);
    EXPECT_EQ(info.type, t.type);
    EXPECT_EQ(info.shape, t.shape);
    EXPECT_EQ(info.offset % 64, 0u);
    const auto raw = f.raw_bytes(t.name);
    EXPECT_EQ(std::vector<uint8_t>(raw.begin(), raw.end()), qt::bytes_of(t.data));
  }
  // serialize_gguf gives the same bytes as the file.
  EXPECT_EQ(serialize_gguf(md, tensors), read_file(path));
}

TEST(GGUFWriter, DefaultAlignmentIs32AndGeneralAlignmentIsHonoured) {
  for (uint32_t align : {0u, 32u, 128u}) {
    GGUFMetadata md = {{"general.architecture", gguf_string("x")}};
    if (align) md.push_back({"general.alignment", gguf_u32(align)});
    const float v[3] = {1, 2, 3};
    std::vector<GGUFWriteTensor> ts = {{"a", 0, {3}, bytes_tensor(v, 12)}, {"b", 0, {3}, bytes_tensor(v, 12)}};
    const auto bytes = serialize_gguf(md, ts);
    const GGUFHeader h = parse_gguf(bytes.data(), bytes.size(), "mem");
    const uint64_t want = align ? align : 32;
    EXPECT_EQ(h.alignment, want);
    EXPECT_EQ(h.data_offset % want, 0u);
    EXPECT_EQ(h.tensors[1].offset, want);  // 12 bytes padded to one alignment unit
    EXPECT_EQ(bytes.size(), h.data_offset + 2 * want);
  }
}

TEST(GGUFWriter, EmptyFileHasOnlyAHeader) {
  const auto bytes = serialize_gguf({}, {});
  const GGUFHeader h = parse_gguf(bytes.data(), bytes.size(), "mem");
  EXPECT_EQ(h.tensors.size(), 0u);
  EXPECT_EQ(h.kv.size(), 0u);
}

TEST(GGUFWriter, ValidationErrorsNameTheKeyOrTensor) {
  const float v[64] = {};
  const Tensor b32 = bytes_tensor(v, 32 * 4);
  auto err = [](GGUFMetadata md, std::vector<GGUFWriteTensor> ts) { return error_of([&] { serialize_gguf(md, ts); }); };
  EXPECT_NE(err({}, {{"w", 0, {32}, b32}, {"w", 0, {32}, b32}}).find("'w' is given twice"), std::string::npos);
  EXPECT_NE(err({{"k", gguf_u8(1)}, {"k", gguf_u8(2)}}, {}).find("'k' is given twice"), std::string::npos);
  EXPECT_NE(err({}, {{"w", 99, {32}, b32}}).find("unknown ggml type id 99"), std::string::npos);
  EXPECT_NE(err({}, {{"w", uint32_t(GGMLType::Q4_K), {2, 100}, b32}}).find("not a multiple of the block size 256"),
            std::string::npos);
  const std::string wrong = err({}, {{"w.q8", uint32_t(GGMLType::Q8_0), {2, 32}, b32}});
  EXPECT_NE(wrong.find("'w.q8'"), std::string::npos) << wrong;
  EXPECT_NE(wrong.find("needs 68 bytes but its data has 128"), std::string::npos) << wrong;
  EXPECT_NE(err({}, {{"w", 0, {1, 1, 1, 1, 32}, b32}}).find("5 dims"), std::string::npos);
  EXPECT_NE(err({}, {{"w", 0, {}, b32}}).find("0 dims"), std::string::npos);
  EXPECT_NE(err({{"general.alignment", gguf_u32(48)}}, {}).find("not a power of two"), std::string::npos);
  EXPECT_NE(err({{"general.alignment", gguf_string("32")}}, {}).find("must be a uint32"), std::string::npos);
  EXPECT_NE(err({{"a", gguf_array(GGUFValueType::int32, {gguf_u8(1)})}}, {}).find("holding a uint8"), std::string::npos);
  GGUFValue bad = gguf_u8(0);
  bad.u = 300;
  EXPECT_NE(err({{"big", bad}}, {}).find("does not fit uint8"), std::string::npos);
}

TEST(GGUFWriter, FailedWriteLeavesNothingBehind) {
  TmpDir tmp;
  const float v[32] = {};
  const fs::path path = tmp.p / "out.gguf";
  // Invalid input: nothing is created.
  EXPECT_THROW(write_gguf(path, {}, {{"w", uint32_t(GGMLType::Q8_0), {1, 32}, bytes_tensor(v, 10)}}), Error);
  EXPECT_EQ(tmp.entries(), 0u);
  // An existing file stays as it was.
  write_gguf(path, {{"v", gguf_u32(1)}}, {});
  const auto before = read_file(path);
  EXPECT_THROW(write_gguf(path, {{"v", gguf_u32(2)}}, {{"w", 0, {3}, bytes_tensor(v, 4)}}), Error);
  EXPECT_EQ(read_file(path), before);
  EXPECT_EQ(tmp.entries(), 1u);
  // An unwritable destination (a missing folder) fails naming it, leaving nothing.
  const std::string e = error_of([&] { write_gguf(tmp.p / "missing" / "x.gguf", {}, {}); });
  EXPECT_NE(e.find("cannot create a temporary file"), std::string::npos) << e;
  EXPECT_EQ(tmp.entries(), 1u);
}

// ---- the committed diffq-written file, checked by gguf-py -------------------------------------------

TEST(GGUFWritten, CommittedFileIsWhatDiffqWrites) {
  const fs::path path = qt::fixture_dir() / "written.gguf";
  if (const char* regen = std::getenv("DIFFQ_REGENERATE_GGUF_FIXTURE"); regen && std::string(regen) == "1") {
    write_gguf(path, qt::recipe_metadata(), qt::recipe_tensors());
    GTEST_SKIP() << "wrote " << path << "; now run tools/reference/check_gguf_written.py";
  }
  ASSERT_TRUE(fs::exists(path)) << path;
  EXPECT_EQ(read_file(path), serialize_gguf(qt::recipe_metadata(), qt::recipe_tensors()))
      << "written.gguf is stale: regenerate it (see gguf_written_recipe.h)";
}

TEST(GGUFWritten, GgufPyReadTheCommittedFileAndFoundItCorrect) {
  const fs::path dir = qt::fixture_dir();
  std::ifstream in(dir / "written_check.json");
  ASSERT_TRUE(in.good());
  const auto j = nlohmann::json::parse(in);
  EXPECT_EQ(j["ok"], true) << j.dump(2);
  EXPECT_EQ(j["errors"].size(), 0u) << j.dump(2);
  EXPECT_EQ(j["file"], "written.gguf");
  EXPECT_EQ(j["sha256"].get<std::string>(), diffq::testing::sha256_hex(read_file(dir / "written.gguf")))
      << "written_check.json was made for another written.gguf: rerun tools/reference/check_gguf_written.py";
  const auto tensors = qt::recipe_tensors();
  EXPECT_EQ(j["tensors"].size(), tensors.size());
  for (const auto& t : tensors) {
    ASSERT_TRUE(j["tensors"].contains(t.name)) << t.name;
    EXPECT_EQ(j["tensors"][t.name]["ok"], true) << t.name;
  }
  EXPECT_EQ(j["metadata"].size(), qt::recipe_metadata().size());
}

TEST(GGUFSha256, KnownVectors) {
  EXPECT_EQ(diffq::testing::sha256_hex({}), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  const std::string abc = "abc";
  EXPECT_EQ(diffq::testing::sha256_hex(std::vector<uint8_t>(abc.begin(), abc.end())),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const std::string two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  EXPECT_EQ(diffq::testing::sha256_hex(std::vector<uint8_t>(two.begin(), two.end())),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

}  // namespace
