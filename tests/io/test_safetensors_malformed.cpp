// Malformed safetensors input: every defect is a clear diffq::Error, never a crash or OOB read.
// The files are generated here, into a temp dir.
#include <gtest/gtest.h>

#include "io/safetensors.h"
#include "io/sharded_safetensors.h"
#include "io_test_util.h"

using namespace diffq;
using namespace diffq::io;
using namespace diffq::io::testing;

namespace {
std::vector<uint8_t> st_bytes(const std::string& header, size_t data_bytes, uint64_t claimed = ~0ull) {
  const uint64_t n = claimed == ~0ull ? header.size() : claimed;
  std::vector<uint8_t> b(8);
  for (int i = 0; i < 8; ++i) b[i] = uint8_t(n >> (8 * i));
  b.insert(b.end(), header.begin(), header.end());
  b.resize(b.size() + data_bytes, 0);
  return b;
}

class Malformed : public ::testing::Test {
 protected:
  // Writes the bytes to a file and expects SafetensorsFile::open to fail with all `parts`.
  void expect_open_error(const std::vector<uint8_t>& bytes, const std::vector<std::string>& parts) {
    const auto p = dir_ / "bad.safetensors";
    write_bytes(p, bytes);
    std::vector<std::string> all = {"[safetensors]"};
    all.insert(all.end(), parts.begin(), parts.end());
    expect_error([&] { SafetensorsFile::open(p); }, all);
    // The in-memory parser must agree (this is what the fuzzer drives).
    expect_error([&] { parse_safetensors(bytes.data(), bytes.size(), "mem"); }, parts);
  }
  void expect_header_error(const std::string& header, size_t data, const std::vector<std::string>& parts) {
    expect_open_error(st_bytes(header, data), parts);
  }
  TempDir dir_;
};

const std::string kOne = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
}  // namespace

TEST_F(Malformed, ValidBaselineOpens) {
  write_bytes(dir_ / "ok.safetensors", st_bytes(kOne, 8));
  EXPECT_EQ(SafetensorsFile::open(dir_ / "ok.safetensors").tensor("a").numel(), 2);
}

TEST_F(Malformed, TruncatedFiles) {
  expect_open_error({}, {"0 bytes", "too short"});
  expect_open_error({1, 0, 0, 0, 0}, {"5 bytes", "too short"});
  // Header cut short: claims its full length but the file ends inside it.
  auto b = st_bytes(kOne, 8);
  b.resize(8 + kOne.size() / 2);
  expect_open_error(b, {"claims", "but the file has", "truncated"});
  // Every prefix of a valid file is rejected.
  const auto full = st_bytes(kOne, 8);
  for (size_t n = 0; n < full.size(); ++n) {
    const std::vector<uint8_t> prefix(full.begin(), full.begin() + long(n));
    EXPECT_THROW(parse_safetensors(prefix.data(), prefix.size(), "prefix"), Error) << n;
  }
}

TEST_F(Malformed, HeaderLengthBeyondTheFile) {
  expect_open_error(st_bytes(kOne, 8, 1000), {"claims 1000 B but the file has"});
  expect_open_error(st_bytes(kOne, 8, uint64_t(4) << 30), {"claims 4.0 GiB", "limit"});
  expect_open_error(st_bytes(kOne, 8, ~0ull - 3), {"limit"});
}

TEST_F(Malformed, OffsetsOutOfRange) {
  expect_header_error(kOne, 4, {"'a'", "ends at byte 8", "only 4 bytes"});
  expect_header_error(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[18446744073709551608,0]}})", 8,
                      {"end < begin"});
  expect_header_error(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,18446744073709551615]}})", 8,
                      {"byte range"});
  expect_header_error(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[-8,0]}})", 8,
                      {"data offset that is not a non-negative integer"});
  expect_header_error(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", 8, {"data_offsets"});
  expect_header_error(R"({"a":{"dtype":"F32","shape":[2]}})", 8, {"data_offsets"});
}

TEST_F(Malformed, EndBeforeBegin) {
  expect_header_error(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", 8, {"'a'", "end < begin"});
}

TEST_F(Malformed, OverlapsAndGaps) {
  expect_header_error(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                      R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                      12, {"'b'", "starts at byte 4", "'a' ends at 8", "overlap"});
  expect_header_error(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                      R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                      12, {"'b'", "gap"});
  expect_header_error(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8,
                      {"first tensor 'a'", "instead of 0"});
  // Same range twice is an overlap too.
  expect_header_error(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                      R"("b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                      8, {"overlap"});
  // Bytes after the last tensor are not covered.
  expect_header_error(kOne, 12, {"end at byte 8", "12 bytes", "trailing"});
}

TEST_F(Malformed, DtypeTimesShapeMustMatchTheByteRange) {
  expect_header_error(R"({"a":{"dtype":"F16","shape":[2,3],"data_offsets":[0,8]}})", 8,
                      {"'a'", "F16 [2, 3] = 12 bytes", "byte range of 8 bytes"});
  expect_header_error(R"({"a":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}})", 2, {"whole bytes"});
}

TEST_F(Malformed, InvalidJson) {
  expect_header_error(R"({"a":{"dtype":"F32",)", 0, {"not valid JSON"});
  expect_header_error("{\"a\xff\":1}", 0, {"not valid JSON"});
  expect_header_error(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}} trailing)", 8,
                      {"not valid JSON"});
}

TEST_F(Malformed, HeaderNotAnObject) {
  expect_header_error("[1, 2, 3]", 0, {"does not start with '{'"});
  expect_header_error("\"str\"   ", 0, {"does not start with '{'"});
  expect_header_error(R"({"a":5})", 0, {"tensor 'a'", "is not an object"});
  expect_header_error(R"({"__metadata__":[1]})", 0, {"__metadata__", "not an object"});
  expect_header_error(R"({"__metadata__":{"k":1}})", 0, {"'k'", "not a string"});
}

TEST_F(Malformed, DuplicateTensorNames) {
  expect_header_error(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                      R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                      8, {"key 'a' twice"});
  expect_header_error(R"({"__metadata__":{"k":"1","k":"2"}})", 0, {"key 'k' twice"});
}

TEST_F(Malformed, NegativeAndHugeShapes) {
  expect_header_error(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8,
                      {"'a'", "shape entry that is not a non-negative integer"});
  expect_header_error(R"({"a":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}})", 8,
                      {"not a non-negative integer"});
  expect_header_error(R"({"a":{"dtype":"F32","shape":[1e30],"data_offsets":[0,8]}})", 8,
                      {"not a non-negative integer"});
  // numel overflows 64 bits; numel * 4 overflows; a dim beyond int64.
  expect_header_error(R"({"a":{"dtype":"U8","shape":[4294967296,4294967296,16],"data_offsets":[0,8]}})", 8,
                      {"overflows"});
  expect_header_error(R"({"a":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,8]}})", 8,
                      {"overflows"});
  expect_header_error(R"({"a":{"dtype":"U8","shape":[9223372036854775808],"data_offsets":[0,8]}})", 8,
                      {"beyond int64"});
  // A zero dim next to a huge one is fine arithmetically (0 elements), and must match [0,0].
  write_bytes(dir_ / "z.safetensors",
              st_bytes(R"({"a":{"dtype":"F32","shape":[0,9223372036854775807],"data_offsets":[0,0]}})", 0));
  EXPECT_EQ(SafetensorsFile::open(dir_ / "z.safetensors").tensor("a").numel(), 0);
  expect_header_error(R"({"a":{"dtype":"F32","shape":"2","data_offsets":[0,8]}})", 8, {"shape"});
}

TEST_F(Malformed, UnknownDtype) {
  expect_header_error(R"({"a":{"dtype":"F99","shape":[2],"data_offsets":[0,8]}})", 8,
                      {"'a'", "unknown dtype 'F99'"});
  expect_header_error(R"({"a":{"dtype":7,"shape":[2],"data_offsets":[0,8]}})", 8, {"dtype"});
}

TEST_F(Malformed, NotAFile) {
  expect_error([&] { SafetensorsFile::open(dir_ / "missing.safetensors"); },
               {"[safetensors]", "cannot open", "missing.safetensors"});
  expect_error([&] { SafetensorsFile::open(dir_.path()); }, {"not a regular file"});
}

// ---- sharded ----------------------------------------------------------------------------------------

TEST_F(Malformed, ShardedIndexDefects) {
  write_bytes(dir_ / "s1.safetensors", st_bytes(kOne, 8));
  const auto idx = dir_ / "m.safetensors.index.json";
  write_text(idx, R"({"metadata":{"total_size":8},"weight_map":{"a":"s1.safetensors","b":"s2.safetensors"}})");
  expect_error([&] { ShardedSafetensors::open(idx); },
               {"[safetensors]", "missing shard s2.safetensors", "'b'", "m.safetensors.index.json"});
  write_text(idx, R"({"weight_map":{"a":"s1.safetensors","b":"s1.safetensors"}})");
  const auto s = ShardedSafetensors::open(idx);
  EXPECT_EQ(s.tensor("a").numel(), 2);
  expect_error([&] { s.tensor("b"); }, {"'b'", "s1.safetensors", "does not contain it"});
  expect_error([&] { s.tensor("c"); }, {"no tensor 'c'"});
  EXPECT_FALSE(s.total_size().has_value());
  write_text(idx, R"({"weight_map":[1]})");
  expect_error([&] { ShardedSafetensors::open(idx); }, {"weight_map"});
  write_text(idx, R"({"weight_map":{"a":"../s1.safetensors"}})");
  expect_error([&] { ShardedSafetensors::open(idx); }, {"not a file name"});
  write_text(idx, R"({"weight_map":{)");
  expect_error([&] { ShardedSafetensors::open(idx); }, {"not valid JSON"});
  expect_error([&] { ShardedSafetensors::open(dir_ / "nope.index.json"); }, {"does not exist"});
}
