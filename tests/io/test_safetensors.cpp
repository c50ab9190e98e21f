// safetensors reading/writing against files written by Python's safetensors.torch.save_file.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "io/mapped_file.h"
#include "io/safetensors.h"
#include "io_test_util.h"

using namespace diffq;
using namespace diffq::io;
using namespace diffq::io::testing;

namespace {
const nlohmann::json& exp_all() { return expected()["all_dtypes"]; }
std::filesystem::path all_dtypes_path() { return fixture_dir() / "all_dtypes.safetensors"; }

// Builds a safetensors file from a header string and a data section.
std::vector<uint8_t> st_bytes(const std::string& header, size_t data_bytes, uint64_t claimed = ~0ull) {
  const uint64_t n = claimed == ~0ull ? header.size() : claimed;
  std::vector<uint8_t> b(8);
  for (int i = 0; i < 8; ++i) b[i] = uint8_t(n >> (8 * i));
  b.insert(b.end(), header.begin(), header.end());
  for (size_t i = 0; i < data_bytes; ++i) b.push_back(uint8_t(i * 7 + 1));
  return b;
}
}  // namespace

TEST(Safetensors, ReadsEveryDtypeWrittenByPython) {
  const SafetensorsFile f = SafetensorsFile::open(all_dtypes_path());
  EXPECT_EQ(f.metadata(), (Metadata{{"format", "pt"}}));
  EXPECT_EQ(f.header().header_bytes, exp_all()["header_bytes"].get<uint64_t>());
  ASSERT_EQ(f.entries().size(), exp_all()["tensors"].size());
  EXPECT_EQ(f.names(), exp_all()["file_order"].get<std::vector<std::string>>());
  for (const auto& [name, e] : exp_all()["tensors"].items()) {
    SCOPED_TRACE(name);
    const Tensor t = f.tensor(name);
    EXPECT_EQ(std::string(safetensors_dtype_name(t.dtype())), e["dtype"].get<std::string>());
    EXPECT_EQ(t.shape(), e["shape"].get<Shape>());
    ASSERT_EQ(t.nbytes(), e["nbytes"].get<size_t>());
    EXPECT_EQ(fnv1a64(t.data_ptr(), t.nbytes()), e["fnv1a64"].get<std::string>());
    if (e.contains("hex")) EXPECT_EQ(hex(t.data_ptr(), t.nbytes()), e["hex"].get<std::string>());
    if (e.contains("values")) {
      const auto got = t.to_f64_vector();
      ASSERT_EQ(got.size(), e["values"].size());
      for (size_t i = 0; i < got.size(); ++i) {
        const auto& v = e["values"][i];
        if (v.is_string()) {
          const std::string s = v.get<std::string>();
          if (s == "nan") EXPECT_TRUE(std::isnan(got[i])) << i;
          else EXPECT_EQ(got[i], s == "inf" ? INFINITY : -INFINITY) << i;
        } else {
          EXPECT_EQ(got[i], v.get<double>()) << i;
        }
      }
    }
  }
  const auto first = f.tensor("randn").to_f32_vector();
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(first[i], exp_all()["tensors"]["randn"]["first"][i].get<float>());
}

TEST(Safetensors, TensorsAreZeroCopyAndKeepTheMappingAlive) {
  Tensor t;
  const uint8_t* file_bytes_begin = nullptr;
  {
    const SafetensorsFile f = SafetensorsFile::open(all_dtypes_path());
    t = f.tensor("randn");
    EXPECT_FALSE(t.storage()->owns_allocation());
    const auto& e = f.entry("randn");
    const auto bytes = read_bytes(all_dtypes_path());
    EXPECT_EQ(std::memcmp(t.data_ptr(), bytes.data() + f.header().data_offset() + e.begin, e.nbytes()), 0);
    file_bytes_begin = static_cast<const uint8_t*>(t.data_ptr());
  }
  // The SafetensorsFile is gone; the tensor still reads the mapped bytes.
  EXPECT_EQ(t.data_ptr(), file_bytes_begin);
  EXPECT_EQ(t.to_f32_vector()[0], exp_all()["tensors"]["randn"]["first"][0].get<float>());
  // Writes land in private copy-on-write pages, never in the file.
  const auto before = read_bytes(all_dtypes_path());
  t.data<float>()[0] = 12345.0f;
  EXPECT_EQ(read_bytes(all_dtypes_path()), before);
}

TEST(Safetensors, WritesBytesIdenticalToPython) {
  const SafetensorsFile f = SafetensorsFile::open(all_dtypes_path());
  // Give the tensors in a different order than the file: the writer must sort as Python does.
  NamedTensors named;
  for (const auto& [name, t] : f.tensors()) named.emplace_back(name, t);
  const std::vector<uint8_t> ours = serialize_safetensors(named, Metadata{{"format", "pt"}});
  EXPECT_EQ(ours, read_bytes(all_dtypes_path()));

  TempDir dir;
  save_safetensors(dir / "copy.safetensors", f.tensors(), Metadata{{"format", "pt"}});
  EXPECT_EQ(read_bytes(dir / "copy.safetensors"), read_bytes(all_dtypes_path()));
  // Only the final file is left behind (the temporary was renamed).
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), {}), 1);
}

TEST(Safetensors, MetadataWithEscapesMatchesPython) {
  const auto& e = expected()["metadata_file"];
  const SafetensorsFile f = SafetensorsFile::open(fixture_dir() / "metadata.safetensors");
  const Metadata want = e["metadata"].get<Metadata>();
  EXPECT_EQ(f.metadata(), want);
  // Python writes these keys in random (HashMap) order; the fixture script kept a save whose order
  // came out sorted, which is diffq's order, so the bytes must match exactly. Also compare the
  // headers as parsed JSON, which is what would hold for any other order.
  const std::vector<uint8_t> ours = serialize_safetensors({{"w", f.tensor("w")}}, want);
  const std::vector<uint8_t> theirs = read_bytes(fixture_dir() / "metadata.safetensors");
  EXPECT_EQ(ours, theirs);
  ASSERT_EQ(ours.size(), theirs.size());
  const SafetensorsHeader ho = parse_safetensors(ours.data(), ours.size(), "ours");
  auto header_json = [](const std::vector<uint8_t>& b, const SafetensorsHeader& h) {
    return nlohmann::json::parse(b.begin() + 8, b.begin() + 8 + long(h.header_bytes));
  };
  const SafetensorsHeader ht = parse_safetensors(theirs.data(), theirs.size(), "theirs");
  EXPECT_EQ(header_json(ours, ho), header_json(theirs, ht));
  EXPECT_TRUE(std::equal(ours.begin() + long(ho.data_offset()), ours.end(),
                         theirs.begin() + long(ht.data_offset())));
  EXPECT_EQ(ours.size() % 8, theirs.size() % 8);
}

TEST(Safetensors, EmptyMetadataAndNoTensorsAsPython) {
  // save_file({}, path) -> b'\x08\0..{}      '
  const std::vector<uint8_t> empty = serialize_safetensors({});
  std::string want("\x08\0\0\0\0\0\0\0{}      ", 16);
  EXPECT_EQ(std::string(empty.begin(), empty.end()), want);
  const auto h = parse_safetensors(empty.data(), empty.size(), "empty");
  EXPECT_TRUE(h.tensors.empty());
  EXPECT_FALSE(h.metadata.has_value());
  // metadata={} -> "__metadata__":{} is written (Some(empty) in Rust)
  const std::vector<uint8_t> m = serialize_safetensors({}, Metadata{});
  EXPECT_NE(std::string(m.begin(), m.end()).find("{\"__metadata__\":{}}"), std::string::npos);
}

TEST(Safetensors, WritesNonContiguousViewsInLogicalOrder) {
  const Tensor base = Tensor::arange(24, DType::f32).view({2, 3, 4});
  const Tensor p = base.permute({2, 0, 1});            // [4, 2, 3], non-contiguous
  const Tensor s = base.slice(2, 1, 4, 2);             // [2, 3, 2], strided inner dim
  const Tensor b16 = Tensor::arange(6, DType::bf16).view({2, 3}).transpose(0, 1);
  ASSERT_FALSE(p.is_contiguous());
  TempDir dir;
  save_safetensors(dir / "v.safetensors", NamedTensors{{"p", p}, {"s", s}, {"b16", b16}});
  const SafetensorsFile f = SafetensorsFile::open(dir / "v.safetensors");
  EXPECT_EQ(f.tensor("p").shape(), (Shape{4, 2, 3}));
  EXPECT_EQ(f.tensor("p").to_f32_vector(), p.to_f32_vector());
  EXPECT_EQ(f.tensor("s").to_f32_vector(), s.to_f32_vector());
  EXPECT_EQ(f.tensor("b16").to_f32_vector(), b16.to_f32_vector());
  EXPECT_EQ(f.tensor("b16").dtype(), DType::bf16);
}

TEST(Safetensors, FailedWriteLeavesNoFileAndKeepsTheOldOne) {
  TempDir dir;
  const auto path = dir / "m.safetensors";
  save_safetensors(path, NamedTensors{{"a", Tensor::arange(3)}});
  const auto before = read_bytes(path);
  expect_error([&] { save_safetensors(path, NamedTensors{{"a", Tensor::arange(3)}, {"a", Tensor::arange(2)}}); },
               {"[safetensors]", "'a' given twice"});
  expect_error([&] { save_safetensors(path, NamedTensors{{"__metadata__", Tensor::arange(3)}}); },
               {"__metadata__"});
  EXPECT_EQ(read_bytes(path), before);
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), {}), 1);
  expect_error([&] { save_safetensors(dir / "no_such_dir" / "x.safetensors", NamedTensors{}); },
               {"cannot create a temporary file", "no_such_dir"});
}

TEST(Safetensors, UnsupportedDtypeIsAClearErrorNamingTheTensor) {
  TempDir dir;
  const std::string h =
      R"({"d":{"dtype":"F64","shape":[2],"data_offsets":[0,16]},"f":{"dtype":"F32","shape":[1],"data_offsets":[16,20]}})";
  write_bytes(dir / "f64.safetensors", st_bytes(h, 20));
  const SafetensorsFile f = SafetensorsFile::open(dir / "f64.safetensors");  // listing still works
  EXPECT_EQ(f.entry("d").dtype_name, "F64");
  EXPECT_FALSE(f.entry("d").dtype.has_value());
  EXPECT_EQ(f.tensor("f").numel(), 1);
  expect_error([&] { f.tensor("d"); }, {"[safetensors]", "'d'", "unsupported dtype F64", "F8_E4M3"});
  expect_error([&] { f.tensors(); }, {"unsupported dtype F64"});
  expect_error([&] { f.tensor("nope"); }, {"no tensor 'nope'", "f64.safetensors"});
}

TEST(Safetensors, MisalignedDataIsCopiedNotMisread) {
  TempDir dir;
  // "u" (1 byte) then an F32 at data offset 1; header of 8*k bytes so the F32 is misaligned.
  std::string h = R"({"u":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"x":{"dtype":"F32","shape":[1],"data_offsets":[1,5]}})";
  h.append((8 - h.size() % 8) % 8, ' ');
  std::vector<uint8_t> b = st_bytes(h, 0);
  b.push_back(9);
  const float v = 1.5f;
  const auto* vp = reinterpret_cast<const uint8_t*>(&v);
  b.insert(b.end(), vp, vp + 4);
  write_bytes(dir / "mis.safetensors", b);
  const SafetensorsFile f = SafetensorsFile::open(dir / "mis.safetensors");
  const Tensor x = f.tensor("x");
  EXPECT_EQ(reinterpret_cast<uintptr_t>(x.data_ptr()) % 4, 0u);
  EXPECT_EQ(x.item(), 1.5);
  EXPECT_EQ(f.tensor("u").item(), 9.0);
}

TEST(Safetensors, ScalarAndEmptyTensorsRoundTrip) {
  TempDir dir;
  save_safetensors(dir / "s.safetensors",
                   NamedTensors{{"scalar", Tensor::full({}, 2.0, DType::f16)},
                                {"empty", Tensor::empty({0, 5}, DType::i64)}});
  const SafetensorsFile f = SafetensorsFile::open(dir / "s.safetensors");
  EXPECT_EQ(f.tensor("scalar").dim(), 0);
  EXPECT_EQ(f.tensor("scalar").item(), 2.0);
  EXPECT_EQ(f.tensor("empty").shape(), (Shape{0, 5}));
  EXPECT_EQ(f.tensor("empty").numel(), 0);
}

TEST(MappedFile, FormatsBytes) {
  EXPECT_EQ(format_bytes(17), "17 B");
  EXPECT_EQ(format_bytes(12ull << 20), "12 MiB");
  EXPECT_EQ(format_bytes(4ull << 30), "4.0 GiB");
}
