// GGUF reading against a file written by the `gguf` Python package, and malformed input.
#include <gtest/gtest.h>

#include <cstring>

#include "io/gguf.h"
#include "io_test_util.h"

using namespace diffq;
using namespace diffq::io;
using namespace diffq::io::testing;

namespace {
const nlohmann::json& exp_gguf() { return expected()["gguf"]; }

// Little-endian GGUF byte builder for hand-made (often broken) files.
struct GGUFBuilder {
  std::vector<uint8_t> b;
  template <class T>
  GGUFBuilder& put(T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    b.insert(b.end(), p, p + sizeof(T));
    return *this;
  }
  GGUFBuilder& str(const std::string& s) {
    put<uint64_t>(s.size());
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
  GGUFBuilder& header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
    b.insert(b.end(), {'G', 'G', 'U', 'F'});
    put<uint32_t>(version).put<uint64_t>(n_tensors).put<uint64_t>(n_kv);
    return *this;
  }
  GGUFBuilder& tensor(const std::string& name, std::vector<uint64_t> ne, uint32_t type, uint64_t offset) {
    str(name).put<uint32_t>(uint32_t(ne.size()));
    for (auto d : ne) put<uint64_t>(d);
    put<uint32_t>(type).put<uint64_t>(offset);
    return *this;
  }
  GGUFBuilder& pad(size_t align = 32) {
    while (b.size() % align) b.push_back(0);
    return *this;
  }
  GGUFBuilder& data(size_t n) {
    b.resize(b.size() + n, 0x5a);
    return *this;
  }
};

void expect_gguf_error(const std::vector<uint8_t>& bytes, const std::vector<std::string>& parts) {
  std::vector<std::string> all = {"[gguf]"};
  all.insert(all.end(), parts.begin(), parts.end());
  expect_error([&] { parse_gguf(bytes.data(), bytes.size(), "t.gguf"); }, all);
}
}  // namespace

TEST(GGUF, TypeTableMatchesThePythonPackage) {
  for (const GGMLTypeInfo& t : ggml_types()) {
    SCOPED_TRACE(std::string(t.name));
    const auto& q = exp_gguf()["quant_sizes"];
    ASSERT_TRUE(q.contains(std::string(t.name)));
    const auto& v = q[std::string(t.name)];
    EXPECT_EQ(t.id, v[0].get<uint32_t>());
    EXPECT_EQ(t.block_size, v[1].get<int64_t>());
    EXPECT_EQ(t.type_size, v[2].get<int64_t>());
  }
  // The types Diffusers can load from GGUF (spec B.4) are all known, with the spec's sizes.
  const std::vector<std::tuple<const char*, int64_t, int64_t>> required = {
      {"F32", 1, 4},       {"F16", 1, 2},       {"BF16", 1, 2},      {"Q4_0", 32, 18},
      {"Q4_1", 32, 20},    {"Q5_0", 32, 22},    {"Q5_1", 32, 24},    {"Q8_0", 32, 34},
      {"Q2_K", 256, 84},   {"Q3_K", 256, 110},  {"Q4_K", 256, 144},  {"Q5_K", 256, 176},
      {"Q6_K", 256, 210},  {"IQ4_NL", 32, 18},  {"IQ4_XS", 256, 136}};
  for (const auto& [name, bs, ts] : required) {
    const GGMLTypeInfo* t = ggml_type_info(std::string_view(name));
    ASSERT_NE(t, nullptr) << name;
    EXPECT_EQ(t->block_size, bs) << name;
    EXPECT_EQ(t->type_size, ts) << name;
    EXPECT_EQ(ggml_type_info(t->id), t);
  }
  EXPECT_EQ(ggml_type_info(uint32_t(4)), nullptr);  // removed Q4_2
}

TEST(GGUF, ReadsTheFileWrittenByGGUFWriter) {
  const GGUFFile f = GGUFFile::open(fixture_dir() / "tiny.gguf");
  EXPECT_EQ(f.header().version, exp_gguf()["version"].get<uint32_t>());
  EXPECT_EQ(f.header().alignment, 64u);
  EXPECT_EQ(f.header().data_offset, exp_gguf()["data_offset"].get<uint64_t>());
  ASSERT_EQ(f.tensors().size(), exp_gguf()["tensors"].size());
  for (size_t i = 0; i < f.tensors().size(); ++i) {
    const auto& e = exp_gguf()["tensors"][i];
    const GGUFTensorInfo& t = f.tensors()[i];
    SCOPED_TRACE(t.name);
    EXPECT_EQ(t.name, e["name"].get<std::string>());
    EXPECT_EQ(std::string(t.type_name()), e["type"].get<std::string>());
    EXPECT_EQ(t.ne, e["ne"].get<std::vector<uint64_t>>());
    EXPECT_EQ(t.shape, e["shape"].get<Shape>());
    EXPECT_EQ(t.offset, e["offset"].get<uint64_t>());
    EXPECT_EQ(t.nbytes, e["nbytes"].get<uint64_t>());
    const auto raw = f.raw_bytes(t.name);
    EXPECT_EQ(fnv1a64(raw.data(), raw.size()), e["fnv1a64"].get<std::string>());
    const Tensor rt = f.raw_tensor(t.name);
    EXPECT_EQ(rt.dtype(), DType::u8);
    EXPECT_EQ(rt.data_ptr(), static_cast<const void*>(raw.data()));  // zero-copy
  }
  EXPECT_EQ(f.tensor_info("q4_0").shape, (Shape{3, 64}));
  expect_error([&] { f.tensor_info("nope"); }, {"[gguf]", "no tensor 'nope'", "tiny.gguf"});
}

TEST(GGUF, MetadataOfEveryValueType) {
  const GGUFFile f = GGUFFile::open(fixture_dir() / "tiny.gguf");
  for (const auto& [key, e] : exp_gguf()["kv"].items()) {
    SCOPED_TRACE(key);
    const GGUFValue* v = f.find(key);
    ASSERT_NE(v, nullptr);
    const std::string type = e["type"].get<std::string>();
    EXPECT_EQ(std::string(gguf_value_type_name(v->type)), type);
    if (key == "test.arr_nested") continue;  // the Python reader flattens nested arrays; see below
    if (type == "float32" || type == "float64")
      EXPECT_DOUBLE_EQ(v->as_double(), e["value"].get<double>());
    else
      EXPECT_EQ(v->to_json(), e["value"]);
  }
  EXPECT_EQ(f.find("test.u64")->as_uint(), (uint64_t(1) << 63) + 5);
  EXPECT_EQ(f.find("test.i8")->as_int(), -100);
  EXPECT_EQ(f.find("general.architecture")->as_string(), "diffq-test");
  const GGUFValue* nested = f.find("test.arr_nested");
  EXPECT_EQ(nested->elem_type, GGUFValueType::array);
  EXPECT_EQ(nested->to_json(), nlohmann::json::parse("[[1,2],[3]]"));
  const GGUFValue* arr = f.find("test.arr_i32");
  EXPECT_EQ(arr->count, 3u);
  EXPECT_EQ(arr->number_at(1), -2.0);
  EXPECT_EQ(arr->to_json(2), nlohmann::json::parse(R"J([1,-2,"... (1 more)"])J"));
  EXPECT_THROW(f.find("test.str")->as_uint(), Error);
  EXPECT_THROW(f.find("test.i8")->as_uint(), Error);
  EXPECT_EQ(f.find("missing"), nullptr);
}

// Signed integer arrays are read in their own type: through a double, INT64_MAX (2^63 - 1 rounds to
// 2^63) is undefined behaviour to convert back and 2^53 + 1 comes back as 2^53 (fuzz_gguf found it;
// tests/fuzz/corpus/gguf/int64_array_near_2p63.gguf is its reproducer).
TEST(GGUF, Int64ArraysKeepEveryValueExactly) {
  const std::vector<int64_t> values = {INT64_MAX, INT64_MIN, (int64_t(1) << 53) + 1, -((int64_t(1) << 53) + 1), -1};
  GGUFBuilder g;
  g.header(0, 2).str("test.i64s").put<uint32_t>(9).put<uint32_t>(11).put<uint64_t>(values.size());
  for (int64_t v : values) g.put<int64_t>(v);
  g.str("test.i16s").put<uint32_t>(9).put<uint32_t>(3).put<uint64_t>(2).put<int16_t>(-32768).put<int16_t>(32767);
  g.pad();
  const GGUFHeader h = parse_gguf(g.b.data(), g.b.size(), "t.gguf");
  const GGUFValue* a = h.find("test.i64s");
  ASSERT_NE(a, nullptr);
  nlohmann::json want = nlohmann::json::array();
  for (size_t k = 0; k < values.size(); ++k) {
    EXPECT_EQ(a->int_at(k), values[k]) << k;
    want.push_back(values[k]);
  }
  EXPECT_EQ(a->to_json(), want);
  EXPECT_EQ(h.find("test.i16s")->to_json(), nlohmann::json::parse("[-32768, 32767]"));
  EXPECT_THROW(a->int_at(values.size()), Error);
}

TEST(GGUF, HandMadeValidFileDefaultsAlignmentTo32) {
  GGUFBuilder g;
  g.header(2, 1).str("general.architecture").put<uint32_t>(8).str("x");
  g.tensor("a", {32, 2}, 8, 0).tensor("b", {4}, 0, 96);  // Q8_0: 2 blocks * 34 = 68 -> next at 96
  g.pad().data(96 + 16);
  const GGUFHeader h = parse_gguf(g.b.data(), g.b.size(), "t.gguf");
  EXPECT_EQ(h.alignment, 32u);
  EXPECT_EQ(h.data_offset % 32, 0u);
  EXPECT_EQ(h.tensors[0].nbytes, 68u);
  EXPECT_EQ(h.tensors[0].shape, (Shape{2, 32}));
  EXPECT_EQ(h.tensors[1].nbytes, 16u);
  // Version 2 has the same layout.
  GGUFBuilder v2;
  v2.header(0, 0, 2);
  EXPECT_EQ(parse_gguf(v2.b.data(), v2.b.size(), "v2.gguf").version, 2u);
}

TEST(GGUF, MalformedInputIsAClearError) {
  expect_gguf_error({}, {"magic"});
  expect_gguf_error({'G', 'G', 'U', 'X', 3, 0, 0, 0}, {"magic"});
  {
    GGUFBuilder g;
    g.header(0, 0, 1);
    expect_gguf_error(g.b, {"version 1"});
  }
  {
    GGUFBuilder g;
    g.header(0, 0, 4);
    expect_gguf_error(g.b, {"version 4"});
  }
  {  // kv/tensor counts far beyond the file
    GGUFBuilder g;
    g.header(0, uint64_t(1) << 60);
    expect_gguf_error(g.b, {"key/values, more than fit"});
    GGUFBuilder t;
    t.header(uint64_t(1) << 60, 0);
    expect_gguf_error(t.b, {"tensors, more than fit"});
  }
  {  // string length beyond the file
    GGUFBuilder g;
    g.header(0, 1).put<uint64_t>(uint64_t(1) << 62).data(20);
    expect_gguf_error(g.b, {"truncated", "a key"});
  }
  {  // unknown value type
    GGUFBuilder g;
    g.header(0, 1).str("k").put<uint32_t>(13).put<uint32_t>(0);
    expect_gguf_error(g.b, {"'k'", "unknown value type 13"});
  }
  {  // array claiming more elements than bytes
    GGUFBuilder g;
    g.header(0, 1).str("k").put<uint32_t>(9).put<uint32_t>(5).put<uint64_t>(uint64_t(1) << 61).data(16);
    expect_gguf_error(g.b, {"array 'k'", "claims"});
    GGUFBuilder s;
    s.header(0, 1).str("k").put<uint32_t>(9).put<uint32_t>(8).put<uint64_t>(1000).data(16);
    expect_gguf_error(s.b, {"array 'k'"});
  }
  {  // deeply nested arrays
    GGUFBuilder g;
    g.header(0, 1).str("k").put<uint32_t>(9);
    for (int i = 0; i < 40; ++i) g.put<uint32_t>(9).put<uint64_t>(1);
    g.put<uint32_t>(0).put<uint64_t>(0);
    expect_gguf_error(g.b, {"nests arrays"});
  }
  {  // duplicate key, bad bool, bad alignment
    GGUFBuilder g;
    g.header(0, 2).str("k").put<uint32_t>(0).put<uint8_t>(1).str("k").put<uint32_t>(0).put<uint8_t>(2);
    expect_gguf_error(g.b, {"key 'k' twice"});
    GGUFBuilder b;
    b.header(0, 1).str("k").put<uint32_t>(7).put<uint8_t>(7);
    expect_gguf_error(b.b, {"bool byte 7"});
    GGUFBuilder a;
    a.header(0, 1).str("general.alignment").put<uint32_t>(4).put<uint32_t>(48);
    expect_gguf_error(a.b, {"general.alignment", "48", "power of two"});
    GGUFBuilder z;
    z.header(0, 1).str("general.alignment").put<uint32_t>(8).str("32");
    expect_gguf_error(z.b, {"general.alignment", "not an integer"});
  }
  auto one_tensor = [](std::vector<uint64_t> ne, uint32_t type, uint64_t offset, size_t data) {
    GGUFBuilder g;
    g.header(1, 0).tensor("w", std::move(ne), type, offset).pad().data(data);
    return g.b;
  };
  expect_gguf_error(one_tensor({4, 4, 4, 4, 4, 4}, 0, 0, 4096 * 4), {"'w'", "6 dims"});
  expect_gguf_error(one_tensor({4}, 99, 0, 64), {"'w'", "unknown ggml type 99"});
  expect_gguf_error(one_tensor({33}, 8, 0, 64), {"'w'", "ne[0] = 33", "Q8_0 block size 32"});
  expect_gguf_error(one_tensor({4}, 0, 16, 64), {"'w'", "offset 16", "alignment 32"});
  expect_gguf_error(one_tensor({64}, 0, 0, 100), {"'w'", "extends past the end"});
  expect_gguf_error(one_tensor({4}, 0, uint64_t(1) << 63, 64), {"'w'", "extends past the end"});
  expect_gguf_error(one_tensor({uint64_t(1) << 40, uint64_t(1) << 40}, 0, 0, 64), {"'w'", "overflows"});
  expect_gguf_error(one_tensor({uint64_t(1) << 62}, 0, 0, 64), {"'w'", "overflows"});
  {  // overlapping tensors, duplicate tensor names
    GGUFBuilder g;
    g.header(2, 0).tensor("a", {16}, 0, 0).tensor("b", {16}, 0, 32).pad().data(128);
    expect_gguf_error(g.b, {"'a' and 'b'", "overlap"});
    GGUFBuilder d;
    d.header(2, 0).tensor("a", {4}, 0, 0).tensor("a", {4}, 0, 32).pad().data(64);
    expect_gguf_error(d.b, {"tensor 'a' twice"});
  }
  // Every prefix of the real fixture that cuts into a tensor fails cleanly (GGUFWriter pads the end of
  // the file to the alignment; cutting only that padding leaves a valid file).
  const auto full = read_bytes(fixture_dir() / "tiny.gguf");
  uint64_t end = 0;
  for (const auto& t : exp_gguf()["tensors"])
    end = std::max(end, t["offset"].get<uint64_t>() + t["nbytes"].get<uint64_t>());
  end += exp_gguf()["data_offset"].get<uint64_t>();
  ASSERT_LE(end, full.size());
  EXPECT_NO_THROW(parse_gguf(full.data(), end, "exact"));
  for (size_t n = 0; n < end; ++n)
    EXPECT_THROW(parse_gguf(full.data(), n, "prefix"), Error) << n;
  expect_error([] { GGUFFile::open("/nonexistent/x.gguf"); }, {"[gguf]", "cannot open"});
}
