// GGUFQuantizedWeight: config parsing, should_quantize, quantize/load/save, the fused linear against
// the dense linear on the dequantized weight, and the load errors (each names the tensor).
#include <gtest/gtest.h>

#include <cmath>

#include "backend/cpu/quant/dequant_rows.h"
#include "core/random.h"
#include "diffq/error.h"
#include "gguf_test_util.h"
#include "io/gguf.h"
#include "io/gguf_writer.h"
#include "ops/ops.h"
#include "quant/gguf/gguf_weight.h"

namespace {

using namespace diffq;
using diffq::quant::GGUFQuantizationConfig;
using diffq::quant::GGUFQuantizedWeight;
using diffq::quant::gguf::GGMLType;
namespace fs = std::filesystem;

double max_rel(const Tensor& a, const Tensor& b) {
  const auto av = a.to_f32_vector(), bv = b.to_f32_vector();
  EXPECT_EQ(av.size(), bv.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < av.size(); ++i) {
    num = std::max(num, std::abs(double(av[i]) - bv[i]));
    den = std::max(den, std::abs(double(bv[i])));
  }
  return num / den;
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

struct TmpDir {
  fs::path p = fs::temp_directory_path() / ("diffq_gguf_w_" + std::to_string(::getpid()));
  TmpDir() { fs::create_directories(p); }
  ~TmpDir() {
    std::error_code ec;
    fs::remove_all(p, ec);
  }
};

TEST(GGUFConfig, FromJson) {
  auto c = GGUFQuantizationConfig::from_json({{"type", "q4_K"}});
  EXPECT_EQ(c.type, GGMLType::Q4_K);
  EXPECT_EQ(c.compute_dtype, DType::f32);  // Diffusers' default
  EXPECT_EQ(c.scheme(), "gguf_q4_k");
  c = GGUFQuantizationConfig::from_json({{"compute_dtype", "bfloat16"}});
  EXPECT_EQ(c.compute_dtype, DType::bf16);
  c = GGUFQuantizationConfig::from_json({{"quant_method", "gguf"}, {"type", "Q8_0"}, {"compute_dtype", "torch.float16"},
                                         {"unknown_key", 1}});
  EXPECT_EQ(c.type, GGMLType::Q8_0);
  EXPECT_EQ(c.compute_dtype, DType::f16);
  EXPECT_EQ(c.scheme(), "gguf_q8_0");
  EXPECT_EQ(GGUFQuantizationConfig::from_json(c.to_json()).type, GGMLType::Q8_0);
  EXPECT_EQ(c.to_json()["type"], "Q8_0");
  EXPECT_THROW(GGUFQuantizationConfig::from_json({{"type", "q8_1"}}), Error);
  EXPECT_THROW(GGUFQuantizationConfig::from_json({{"compute_dtype", "int8"}}), Error);
  EXPECT_THROW(GGUFQuantizationConfig::from_json({{"compute_dtype", "nonsense"}}), Error);
  EXPECT_THROW(GGUFQuantizationConfig::from_json({{"quant_method", "bitsandbytes"}}), Error);
  EXPECT_THROW(GGUFQuantizationConfig::from_json(nlohmann::json::array()), Error);
}

TEST(GGUFWeight, ShouldQuantize) {
  EXPECT_TRUE(GGUFQuantizedWeight::should_quantize({3072, 3072}, GGMLType::Q4_K));
  EXPECT_FALSE(GGUFQuantizedWeight::should_quantize({64, 100}, GGMLType::Q4_K));
  EXPECT_TRUE(GGUFQuantizedWeight::should_quantize({64, 96}, GGMLType::Q8_0));
  EXPECT_FALSE(GGUFQuantizedWeight::should_quantize({64, 96}, GGMLType::Q6_K));
  EXPECT_FALSE(GGUFQuantizedWeight::should_quantize({256}, GGMLType::Q8_0));
  EXPECT_FALSE(GGUFQuantizedWeight::should_quantize({2, 2, 256}, GGMLType::Q8_0));
  EXPECT_TRUE(GGUFQuantizedWeight::should_quantize({5, 3}, GGMLType::F32));
}

// The fused (tiled) linear equals the dense linear on dequantize(), for every type.
TEST(GGUFWeight, LinearEqualsDenseLinearOnTheDequantizedWeight) {
  Generator g(1);
  const int64_t N = 40, K = 512;
  const Tensor w = randn_tensor({N, K}, g, DType::f32);
  const Tensor x = randn_tensor({2, 3, K}, g, DType::f32);
  const Tensor b = randn_tensor({N}, g, DType::f32);
  for (const auto& t : quant::gguf::supported_types()) {
    SCOPED_TRACE(std::string(t.name()));
    auto q = GGUFQuantizedWeight::quantize(w, {t.type, DType::f32});
    EXPECT_EQ(q->shape(), (Shape{N, K}));
    EXPECT_EQ(q->nbytes(), size_t(N * t.row_bytes(K)));
    const Tensor wd = q->dequantize(DType::f32);
    EXPECT_LE(max_rel(q->linear(x, b), ops::linear(x, wd, b)), 1e-5);
    // bf16 activations: output dtype follows x.
    const Tensor y16 = q->linear(x.to(DType::bf16), b);
    EXPECT_EQ(y16.dtype(), DType::bf16);
    EXPECT_LE(max_rel(y16, ops::linear(x.to(DType::bf16).to(DType::f32), wd, b)), 1e-2);
  }
}

TEST(GGUFWeight, ComputeDtypeRoundsTheWeightLikeDiffusers) {
  Generator g(2);
  const Tensor w = randn_tensor({16, 256}, g, DType::f32);
  const Tensor x = randn_tensor({4, 256}, g, DType::f32);
  auto q = GGUFQuantizedWeight::quantize(w, {GGMLType::Q6_K, DType::bf16});
  // Diffusers: F.linear(x, dequant(W).to(compute_dtype)) — here in f32 accumulation.
  const Tensor wc = q->dequantize(DType::bf16).to(DType::f32);
  EXPECT_LE(max_rel(q->linear(x, {}), ops::linear(x, wc)), 1e-5);
  std::vector<float> rows(2 * 256), simd(rows.size());
  q->dequant_rows(3, 5, rows.data());
  const auto wv = wc.to_f32_vector();
  for (size_t i = 0; i < rows.size(); ++i) ASSERT_EQ(rows[i], wv[3 * 256 + i]);
  backend::cpu::gguf_dequant_rows(*q, 3, 5, simd.data());  // the CPU's SIMD rows: the same bits
  EXPECT_EQ(simd, rows);
}

TEST(GGUFWeight, DequantizeMatchesGgufPyOnGgmlQuantizedRows) {
  // The fixture's Q4_K rows (ggml-quantized) dequantized by the weight = our reference = gguf-py.
  const auto& f = quant::gguf::testing::fixture("quantize.safetensors");
  const Tensor raw = f.tensor("Q4_K.q");
  const int64_t rows = raw.shape()[0];
  auto q = GGUFQuantizedWeight::load("Q4_K.q", raw.reshape({raw.numel()}), uint32_t(GGMLType::Q4_K), {rows, 512});
  EXPECT_EQ(q->scheme(), "gguf_q4_k");
  const Tensor d = q->dequantize(DType::f32);
  std::vector<float> ref(size_t(rows * 512));
  quant::gguf::dequantize_row_q4_K(raw.data_ptr(), ref.data(), rows * 512);
  EXPECT_TRUE(quant::gguf::testing::same_floats(d.data<float>(), ref.data(), ref.size()));
}

TEST(GGUFWeight, SaveLoadThroughAGgufFileIsZeroCopyAndExact) {
  TmpDir tmp;
  Generator g(3);
  const Tensor w = randn_tensor({8, 256}, g, DType::f32);
  auto q = GGUFQuantizedWeight::quantize(w, {GGMLType::Q5_K, DType::f32});
  const fs::path path = tmp.p / "w.gguf";
  io::write_gguf(path, {{"general.architecture", io::gguf_string("flux")}}, {q->save("blk.0.weight")});
  const io::GGUFFile file = io::GGUFFile::open(path);
  auto r = GGUFQuantizedWeight::load(file, "blk.0.weight", DType::bf16);
  EXPECT_EQ(r->type(), GGMLType::Q5_K);
  EXPECT_EQ(r->compute_dtype(), DType::bf16);
  EXPECT_EQ(r->shape(), (Shape{8, 256}));
  EXPECT_EQ(file.tensor_info("blk.0.weight").ne, (std::vector<uint64_t>{256, 8}));
  EXPECT_EQ(quant::gguf::testing::bytes_of(r->data()), quant::gguf::testing::bytes_of(q->data()));
  EXPECT_EQ(r->data().data_ptr(), static_cast<const void*>(file.raw_bytes("blk.0.weight").data()));  // zero-copy
}

TEST(GGUFWeight, RowRangesShareTheBytes) {
  Generator g(5);
  const Tensor w = randn_tensor({9, 64}, g, DType::f32);
  auto q = GGUFQuantizedWeight::quantize(w, {GGMLType::Q8_0, DType::f32});
  const Tensor full = q->dequantize(DType::f32);
  auto mid = q->rows(3, 7);
  EXPECT_EQ(mid->shape(), (Shape{4, 64}));
  EXPECT_EQ(mid->data().data_ptr(), static_cast<const void*>(static_cast<const uint8_t*>(q->data().data_ptr()) + 3 * 68));
  EXPECT_EQ(mid->dequantize(DType::f32).to_f32_vector(), full.slice(0, 3, 7).contiguous().to_f32_vector());
  EXPECT_EQ(q->rows(9, 9)->shape(), (Shape{0, 64}));
  EXPECT_THROW(q->rows(5, 10), Error);
}

// ---- errors -----------------------------------------------------------------------------------------------

TEST(GGUFWeightErrors, UnsupportedTypeIsNamed) {
  const Tensor raw = io::bytes_tensor(std::vector<uint8_t>(66).data(), 66);
  const std::string e = error_of([&] { GGUFQuantizedWeight::load("blk.3.attn_q.weight", raw, 16, {1, 256}); });
  EXPECT_NE(e.find("IQ2_XXS"), std::string::npos) << e;
  EXPECT_NE(e.find("blk.3.attn_q.weight"), std::string::npos) << e;
  const std::string e2 = error_of([&] { GGUFQuantizedWeight::load("t", raw, 77, {1, 256}); });
  EXPECT_NE(e2.find("unknown ggml type id 77"), std::string::npos) << e2;
}

TEST(GGUFWeightErrors, TruncatedBlockData) {
  std::vector<uint8_t> bytes(2 * 144 - 1);
  const std::string e = error_of([&] {
    GGUFQuantizedWeight::load("w", io::bytes_tensor(bytes.data(), bytes.size()), uint32_t(GGMLType::Q4_K), {2, 256});
  });
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
  EXPECT_NE(e.find("'w'"), std::string::npos) << e;
  EXPECT_NE(e.find("287"), std::string::npos) << e;
  EXPECT_NE(e.find("288"), std::string::npos) << e;
}

TEST(GGUFWeightErrors, ShapeNotAMultipleOfTheBlockSize) {
  std::vector<uint8_t> bytes(1000);
  const Tensor raw = io::bytes_tensor(bytes.data(), bytes.size());
  const std::string e = error_of([&] { GGUFQuantizedWeight::load("proj", raw, uint32_t(GGMLType::Q4_K), {2, 300}); });
  EXPECT_NE(e.find("not a multiple of the Q4_K block size 256"), std::string::npos) << e;
  EXPECT_NE(e.find("'proj'"), std::string::npos) << e;
  EXPECT_NE(error_of([&] { GGUFQuantizedWeight::load("b", raw, uint32_t(GGMLType::Q8_0), {64}); }).find("2-D"),
            std::string::npos);
  Generator g(4);
  EXPECT_NE(error_of([&] { GGUFQuantizedWeight::quantize(randn_tensor({4, 100}, g), {GGMLType::Q8_0, DType::f32}, "fc"); })
                .find("not a multiple of the Q8_0 block size 32"),
            std::string::npos);
}

TEST(GGUFWeightErrors, WrongByteCount) {
  std::vector<uint8_t> bytes(2 * 34 + 5);
  const std::string e = error_of([&] {
    GGUFQuantizedWeight::load("fc1", io::bytes_tensor(bytes.data(), bytes.size()), uint32_t(GGMLType::Q8_0), {2, 32});
  });
  EXPECT_NE(e.find("73 bytes"), std::string::npos) << e;
  EXPECT_NE(e.find("68 are needed"), std::string::npos) << e;
  EXPECT_NE(e.find("'fc1'"), std::string::npos) << e;
  // Not raw bytes at all.
  EXPECT_THROW(GGUFQuantizedWeight::load("fc1", Tensor::zeros({17}, DType::f32), uint32_t(GGMLType::Q8_0), {2, 32}), Error);
}

}  // namespace
