// PyTorch .bin checkpoints (torch.save's zip + pickle) through diffq's restricted unpickler, against
// files written by torch itself (tests/fixtures/torch-bin, tools/reference/make_torch_bin.py): every
// dtype, views with their strides and storage offsets, protocol 2 and 4 pickles, a Diffusers sharded
// .bin folder; and the refusals: a global outside the allow-list (named), a truncated archive, a
// storage offset past the end, a storage larger than its entry, a compressed entry, a bad opcode.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "diffq/error.h"
#include "io/diffusers_folder.h"
#include "io/inspect.h"
#include "io/io_test_util.h"
#include "io/safetensors.h"
#include "io/torch_checkpoint.h"
#include "io/torch_pickle.h"

namespace {

namespace fs = std::filesystem;
using namespace diffq;
using namespace diffq::io;
using diffq::io::testing::TempDir;

const fs::path kDir = fs::path(DIFFQ_SOURCE_DIR) / "tests" / "fixtures" / "torch-bin";

// The tensor's elements in logical (row-major) order as raw bytes, whatever its strides.
std::vector<uint8_t> logical_bytes(const Tensor& t) {
  const size_t es = dtype_size(t.dtype());
  std::vector<uint8_t> out;
  const int64_t n = t.numel();
  if (n == 0) return out;
  std::vector<int64_t> idx(size_t(t.dim()), 0);
  const auto* base = static_cast<const uint8_t*>(t.data_ptr());
  for (int64_t i = 0; i < n; ++i) {
    int64_t off = 0;
    for (size_t d = 0; d < idx.size(); ++d) off += idx[d] * t.strides()[d];
    out.insert(out.end(), base + off * int64_t(es), base + (off + 1) * int64_t(es));
    for (size_t d = idx.size(); d-- > 0;) {
      if (++idx[d] < t.shape()[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

void expect_same(const StateDict& got, const StateDict& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (const auto& [k, w] : want) {
    ASSERT_TRUE(got.count(k)) << what << ": missing " << k;
    const Tensor& g = got.at(k);
    EXPECT_EQ(g.dtype(), w.dtype()) << what << ": " << k;
    EXPECT_EQ(g.shape(), w.shape()) << what << ": " << k;
    EXPECT_EQ(logical_bytes(g), logical_bytes(w)) << what << ": " << k << " differs";
  }
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(TorchBin, EveryDTypeAndViewBitExact) {
  const StateDict want = SafetensorsFile::open(kDir / "tensors.safetensors").tensors();
  for (const char* f : {"tensors.bin", "tensors_p4.bin"}) {
    const TorchCheckpoint c = load_torch_checkpoint(kDir / f);
    expect_same(c.tensors, want, f);
    EXPECT_TRUE(c.metadata.empty());
    EXPECT_EQ(c.keys.front(), "f32");  // the pickle's order
    EXPECT_EQ(c.keys.size(), want.size());
  }
}

TEST(TorchBin, ViewsKeepStridesOffsetsAndShareTheMappedStorage) {
  const TorchCheckpoint c = load_torch_checkpoint(kDir / "tensors.bin");
  const Tensor& t = c.tensors.at("view.t");
  const Tensor& s = c.tensors.at("view.slice");
  const Tensor& r = c.tensors.at("view.row");
  EXPECT_EQ(t.shape(), (Shape{6, 4}));
  EXPECT_EQ(t.strides(), (Shape{1, 6}));
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_EQ(s.offset(), 8);
  EXPECT_EQ(s.strides(), (Shape{6, 1}));
  EXPECT_EQ(r.offset(), 18);
  EXPECT_EQ(t.storage(), s.storage());  // one storage, three views, as torch saved them
  EXPECT_EQ(t.storage(), r.storage());
  EXPECT_FALSE(t.storage()->owns_allocation());  // borrowed from the mmap: zero-copy
  EXPECT_EQ(c.tensors.at("scalar").dim(), 0);
  EXPECT_EQ(c.tensors.at("scalar").item(), 3.25);
  EXPECT_EQ(c.tensors.at("empty").shape(), (Shape{0, 3}));
  EXPECT_EQ(c.tensors.at("i64").to_f64_vector()[0], -std::ldexp(1.0, 62));
}

TEST(TorchBin, ShardedDiffusersFolder) {
  const WeightFiles w = find_weight_files(kDir / "sharded");
  ASSERT_TRUE(w.index.has_value());
  EXPECT_EQ(w.index->filename(), "diffusion_pytorch_model.bin.index.json");
  EXPECT_EQ(w.files.size(), 3u);
  expect_same(load_weight_files(w), SafetensorsFile::open(kDir / "sharded_expected.safetensors").tensors(), "sharded");
  EXPECT_TRUE(load_weight_metadata(w).empty());
}

TEST(TorchBin, SafetensorsWinsOverBinLikeDiffusers) {
  TempDir tmp;
  fs::copy_file(kDir / "tensors.bin", tmp / "diffusion_pytorch_model.bin");
  EXPECT_EQ(find_weight_files(tmp.path()).files[0].filename(), "diffusion_pytorch_model.bin");
  fs::copy_file(kDir / "tensors.safetensors", tmp / "diffusion_pytorch_model.safetensors");
  EXPECT_EQ(find_weight_files(tmp.path()).files[0].filename(), "diffusion_pytorch_model.safetensors");
  fs::remove(tmp / "diffusion_pytorch_model.safetensors");
  fs::rename(tmp / "diffusion_pytorch_model.bin", tmp / "pytorch_model.bin");  // transformers' name
  EXPECT_EQ(load_weight_files(find_weight_files(tmp.path())).size(), 16u);
}

TEST(TorchBin, InspectListsIt) {
  const auto j = inspect_json(kDir / "tensors.bin");
  EXPECT_EQ(j["kind"], "torch_checkpoint");
  EXPECT_EQ(j["tensor_count"], 16);
  EXPECT_EQ(j["dtypes"]["BF16"], 1);
  const std::string text = inspect_text(j);
  EXPECT_NE(text.find("PyTorch checkpoint"), std::string::npos);
  EXPECT_NE(text.find("view.slice"), std::string::npos);
  EXPECT_EQ(inspect_json(kDir / "sharded" / "diffusion_pytorch_model.bin.index.json")["kind"], "torch_checkpoint_index");
}

TEST(TorchBin, RefusesOtherGlobalsNamingThem) {
  const std::string e = error_of([] { load_torch_checkpoint(kDir / "malicious.bin"); });
  EXPECT_NE(e.find("global 'posix.system' is not allowed"), std::string::npos) << e;
  EXPECT_NE(e.find("malicious.bin"), std::string::npos) << e;
  // Straight pickles: builtins.eval by GLOBAL and by STACK_GLOBAL.
  const std::string g = "\x80\x02" "cbuiltins\neval\n)R.";
  EXPECT_NE(error_of([&] { pickle::unpickle(reinterpret_cast<const uint8_t*>(g.data()), g.size(), "x"); })
                .find("global 'builtins.eval' is not allowed"),
            std::string::npos);
  const std::string s = "\x80\x04\x8c\x02os\x8c\x06system\x93.";
  EXPECT_NE(error_of([&] { pickle::unpickle(reinterpret_cast<const uint8_t*>(s.data()), s.size(), "x"); })
                .find("global 'os.system' is not allowed"),
            std::string::npos);
}

TEST(TorchBin, RefusesStorageOffsetPastTheEnd) {
  const std::string e = error_of([] { load_torch_checkpoint(kDir / "bad_offset.bin"); });
  EXPECT_NE(e.find("tensor 'w' (shape [2], stride [1], storage offset 3) reaches past the end of storage '0'"),
            std::string::npos)
      << e;
  const std::string b = error_of([] { load_torch_checkpoint(kDir / "big_storage.bin"); });
  EXPECT_NE(b.find("storage '0' claims 64 float32 elements (256 bytes) but its file entry has 16 bytes"),
            std::string::npos)
      << b;
}

TEST(TorchBin, RefusesCompressedEntryNamingIt) {
  const std::string e = error_of([] { load_torch_checkpoint(kDir / "compressed.bin"); });
  EXPECT_NE(e.find("entry 'tensors/data.pkl' is compressed"), std::string::npos) << e;
}

TEST(TorchBin, RefusesTruncatedArchives) {
  const auto bytes = diffq::io::testing::read_bytes(kDir / "tensors.bin");
  TempDir tmp;
  for (size_t n : {size_t(0), size_t(3), size_t(100), bytes.size() / 2, bytes.size() - 30, bytes.size() - 1}) {
    diffq::io::testing::write_bytes(tmp / "t.bin", std::vector<uint8_t>(bytes.begin(), bytes.begin() + long(n)));
    const std::string e = error_of([&] { load_torch_checkpoint(tmp / "t.bin"); });
    EXPECT_NE(e.find("t.bin"), std::string::npos) << n << ": " << e;
  }
  // Cut inside the data section but keeping a directory: the last entry's data runs past the end.
  std::vector<uint8_t> cut(bytes);
  cut.resize(bytes.size() - 1);
  diffq::io::testing::write_bytes(tmp / "t.bin", cut);
  EXPECT_NE(error_of([&] { load_torch_checkpoint(tmp / "t.bin"); }).find("end-of-central-directory"), std::string::npos);
}

TEST(TorchBin, RefusesBadOpcodesAndLegacyFiles) {
  const std::string p = "\x80\x02\xff.";
  EXPECT_NE(error_of([&] { pickle::unpickle(reinterpret_cast<const uint8_t*>(p.data()), p.size(), "x"); })
                .find("unsupported pickle opcode 0xff"),
            std::string::npos);
  const std::string nostop = "\x80\x02}";
  EXPECT_NE(error_of([&] { pickle::unpickle(reinterpret_cast<const uint8_t*>(nostop.data()), nostop.size(), "x"); })
                .find("ends without STOP"),
            std::string::npos);
  const std::string badmemo = "\x80\x02h\x05.";
  EXPECT_NE(error_of([&] { pickle::unpickle(reinterpret_cast<const uint8_t*>(badmemo.data()), badmemo.size(), "x"); })
                .find("memo key 5 was never stored"),
            std::string::npos);
  TempDir tmp;
  diffq::io::testing::write_bytes(tmp / "old.bin", {0x80, 0x02, 0x8a, 0x0a});
  EXPECT_NE(error_of([&] { load_torch_checkpoint(tmp / "old.bin"); }).find("legacy"), std::string::npos);
}

}  // namespace
