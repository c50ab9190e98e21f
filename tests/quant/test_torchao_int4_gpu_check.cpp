// The CPU half of the GPU check of torchao's int4 weight-only forward (scripts/device-check.sh, part
// torchao_int4). torchao 0.18's Int4Tensor quantizes and multiplies through mslk's CUDA kernels, so the
// committed int4 fixtures come from a Python port of mslk's quantizer (tools/reference/make_quant_torchao.py);
// on a GPU machine tools/reference/check_torchao_int4_gpu.py quantizes the same weights with the real
// torchao + mslk, runs the real forward on the same inputs and compares it with diffq's output, which is
// committed here (tests/fixtures/quant/torchao/written/int4_gpu_diffq.safetensors) because the device check
// does not build the CPU tests.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "quant/torchao/torchao.h"

namespace {

using namespace diffq;
namespace tao = diffq::quant::torchao;
namespace fs = std::filesystem;

fs::path dir() { return fs::path(DIFFQ_SOURCE_DIR) / "tests/fixtures/quant/torchao"; }

const nlohmann::json& cases() {
  static const nlohmann::json j = [] {
    std::ifstream in(dir() / "int4_gpu" / "cases.json");
    return nlohmann::json::parse(in);
  }();
  return j;
}

const io::SafetensorsFile& inputs() {
  static const io::SafetensorsFile f = io::SafetensorsFile::open(dir() / "int4_gpu" / "inputs.safetensors");
  return f;
}

// bf16 bits as a monotonic integer (so neighbours differ by 1 across zero too).
int32_t ordered(uint16_t b) { return (b & 0x8000) ? -int32_t(b & 0x7fff) : int32_t(b); }

::testing::AssertionResult same_bits(const Tensor& got, const Tensor& want, const std::string& what) {
  if (got.dtype() != want.dtype() || got.shape() != want.shape())
    return ::testing::AssertionFailure() << what << ": " << got.str() << " vs " << want.str();
  const Tensor a = got.contiguous(), b = want.contiguous();
  if (std::memcmp(a.data_ptr(), b.data_ptr(), size_t(a.nbytes())) != 0)
    return ::testing::AssertionFailure() << what << ": bytes differ";
  return ::testing::AssertionSuccess();
}

TEST(TorchaoInt4GpuCheck, InputsQuantizeLikeThePort) {
  int n = 0;
  for (const auto& [name, c] : cases().items()) {
    SCOPED_TRACE(name);
    auto qw = tao::quantize(inputs().tensor(name + ".w"), tao::Config::from_json(c.at("config")));
    auto* tw = dynamic_cast<const tao::TorchaoWeight*>(qw.get());
    ASSERT_NE(tw, nullptr);
    EXPECT_EQ(tw->tensor_class(), "Int4Tensor");
    int checked = 0;
    for (const auto& [attr, t] : tw->tensor_data()) {
      EXPECT_TRUE(same_bits(t, inputs().tensor(name + "." + attr), name + "." + attr));
      ++checked;
    }
    EXPECT_EQ(checked, 3);
    ++n;
  }
  EXPECT_EQ(n, 4);
}

// diffq's int4wo linear on the inputs, as committed for the device check. Rewritten with
// DIFFQ_WRITE_TORCHAO_FIXTURES=1 (with the other diffq-written torchao files). Otherwise the committed file
// must still be what diffq computes: each element within one bf16 step (the f32 GEMM's summation order may
// differ between CPUs; a change to the int4 path moves far more).
TEST(TorchaoInt4GpuCheck, CommittedDiffqOutputIsCurrent) {
  io::StateDict out;
  for (const auto& [name, c] : cases().items()) {
    auto qw = tao::quantize(inputs().tensor(name + ".w"), tao::Config::from_json(c.at("config")));
    out[name + ".y"] = qw->linear(inputs().tensor(name + ".x"), inputs().tensor(name + ".bias")).contiguous();
  }
  const fs::path path = dir() / "written" / "int4_gpu_diffq.safetensors";
  if (const char* e = std::getenv("DIFFQ_WRITE_TORCHAO_FIXTURES"); e && std::string(e) == "1")
    io::save_safetensors(path, out);
  ASSERT_TRUE(fs::exists(path)) << path << " (run with DIFFQ_WRITE_TORCHAO_FIXTURES=1)";
  const auto committed = io::SafetensorsFile::open(path);
  EXPECT_EQ(committed.names().size(), out.size());
  for (const auto& [key, y] : out) {
    SCOPED_TRACE(key);
    ASSERT_TRUE(committed.contains(key));
    const Tensor want = committed.tensor(key).contiguous();
    ASSERT_EQ(y.dtype(), DType::bf16);
    ASSERT_EQ(want.dtype(), DType::bf16);
    ASSERT_EQ(y.shape(), want.shape());
    const uint16_t* a = y.data<uint16_t>();
    const uint16_t* b = want.data<uint16_t>();
    int64_t off = 0, far = 0;
    for (int64_t i = 0; i < y.numel(); ++i) {
      const int32_t d = std::abs(ordered(a[i]) - ordered(b[i]));
      off += d != 0;
      far += d > 1;
    }
    EXPECT_EQ(far, 0) << off << " of " << y.numel() << " elements differ";
  }
}

}  // namespace
