// GGUF quantization types against gguf-py / ggml (fixtures from tools/reference/make_quant_gguf.py):
// block sizes, reference dequantization (bit-exact with gguf.quants.dequantize), reference quantization
// (bit-exact with ggml_quantize_chunk, and so with gguf.quants.quantize where gguf-py can), the SIMD
// dequantizers against the scalar reference, and the round-trip error of every type.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "backend/cpu/hwy_config.h"  // the same target list as the library's kernels
#include <hwy/targets.h>

#include "backend/cpu/quant/gguf_dequant.h"
#include "diffq/error.h"
#include "gguf_test_util.h"
#include "quant/gguf/gguf_quants.h"

namespace {

using namespace diffq;
using namespace diffq::quant::gguf;
using namespace diffq::quant::gguf::testing;

TEST(GGUFTypes, TableMatchesIoTableAndGgufPy) {
  const auto& types = expected()["types"];
  ASSERT_EQ(supported_types().size(), types.size());
  for (const TypeTraits& t : supported_types()) {
    SCOPED_TRACE(std::string(t.name()));
    ASSERT_TRUE(types.contains(std::string(t.name())));
    const auto& e = types[std::string(t.name())];
    EXPECT_EQ(uint32_t(t.type), e["id"].get<uint32_t>());
    EXPECT_EQ(t.block_size(), e["block_size"].get<int64_t>());
    EXPECT_EQ(t.type_size(), e["type_size"].get<int64_t>());
    EXPECT_EQ(t.info, io::ggml_type_info(uint32_t(t.type)));
    EXPECT_NE(t.dequantize_ref, nullptr);
    EXPECT_NE(backend::cpu::gguf_dequantizer(t.type), nullptr);
    EXPECT_NE(t.quantize_ref, nullptr);
    EXPECT_EQ(find_type(t.type), &t);
    EXPECT_EQ(parse_type(t.name()), t.type);
  }
  std::vector<std::string> py;
  for (const TypeTraits& t : supported_types())
    if (t.gguf_py_quantizes) py.emplace_back(t.name());
  EXPECT_EQ(py, expected()["gguf_py_quantizes"].get<std::vector<std::string>>());
  for (auto& [name, agrees] : expected()["gguf_py_agrees_with_ggml"].items()) EXPECT_TRUE(agrees.get<bool>()) << name;
}

TEST(GGUFTypes, BlockStructSizesEqualTheTable) {
  const std::pair<GGMLType, size_t> sizes[] = {
      {GGMLType::Q4_0, sizeof(block_q4_0)}, {GGMLType::Q4_1, sizeof(block_q4_1)},
      {GGMLType::Q5_0, sizeof(block_q5_0)}, {GGMLType::Q5_1, sizeof(block_q5_1)},
      {GGMLType::Q8_0, sizeof(block_q8_0)}, {GGMLType::Q2_K, sizeof(block_q2_K)},
      {GGMLType::Q3_K, sizeof(block_q3_K)}, {GGMLType::Q4_K, sizeof(block_q4_K)},
      {GGMLType::Q5_K, sizeof(block_q5_K)}, {GGMLType::Q6_K, sizeof(block_q6_K)},
      {GGMLType::IQ4_NL, sizeof(block_iq4_nl)}, {GGMLType::IQ4_XS, sizeof(block_iq4_xs)}};
  for (auto [t, size] : sizes) EXPECT_EQ(find_type(t)->type_size(), int64_t(size)) << find_type(t)->name();
}

TEST(GGUFTypes, ParseNames) {
  EXPECT_EQ(parse_type("q4_K"), GGMLType::Q4_K);
  EXPECT_EQ(parse_type("Q4_K"), GGMLType::Q4_K);
  EXPECT_EQ(parse_type("gguf_q4_k"), GGMLType::Q4_K);
  EXPECT_EQ(parse_type("iq4_xs"), GGMLType::IQ4_XS);
  EXPECT_EQ(parse_type("bf16"), GGMLType::BF16);
  EXPECT_FALSE(parse_type("q8_1").has_value());  // known to ggml, not supported
  EXPECT_FALSE(parse_type("q4").has_value());
  EXPECT_FALSE(parse_type("").has_value());
}

TEST(GGUFTypes, UnsupportedTypeErrorsNameTheType) {
  try {
    type_or_throw(16, "tensor 'blk.0.w'");  // IQ2_XXS: a ggml type diffq does not support
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("IQ2_XXS"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("blk.0.w"), std::string::npos) << e.what();
  }
  try {
    type_or_throw(999, "tensor 'x'");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("999"), std::string::npos) << e.what();
  }
  EXPECT_THROW(find_type(GGMLType::Q4_K)->row_bytes(100), Error);
  EXPECT_EQ(find_type(GGMLType::Q4_K)->row_bytes(512), 288);
}

// Random block bytes (extreme f16 scales included) dequantized by gguf-py.
TEST(GGUFDequantize, ReferenceIsBitExactWithGgufPy) {
  const auto& f = fixture("dequantize.safetensors");
  for (const TypeTraits& t : supported_types()) {
    SCOPED_TRACE(std::string(t.name()));
    const std::string name(t.name());
    const std::vector<uint8_t> blocks = bytes_of(f.tensor(name + ".blocks"));
    const std::vector<float> want = floats_of(f.tensor(name + ".out"));
    ASSERT_EQ(int64_t(blocks.size()) % t.type_size(), 0);
    const int64_t n = int64_t(blocks.size()) / t.type_size() * t.block_size();
    ASSERT_EQ(size_t(n), want.size());
    std::vector<float> got(size_t(n), -1.0f), fast(size_t(n), -2.0f);
    t.dequantize_ref(blocks.data(), got.data(), n);
    EXPECT_TRUE(same_floats(got.data(), want.data(), want.size()));
    backend::cpu::gguf_dequantizer(t.type)(blocks.data(), fast.data(), n);
    EXPECT_TRUE(same_floats(fast.data(), want.data(), want.size())) << "SIMD path";
  }
}

// ggml's quantizers (ggml_quantize_chunk without an importance matrix) on awkward rows.
TEST(GGUFQuantize, ReferenceIsBitExactWithGgml) {
  const auto& f = fixture("quantize.safetensors");
  const Tensor x = f.tensor("x");
  const int64_t rows = x.shape()[0], K = x.shape()[1];
  const std::vector<float> xs = floats_of(x);
  const auto cases = expected()["quantize_row_cases"].get<std::vector<std::string>>();
  for (const TypeTraits& t : supported_types()) {
    SCOPED_TRACE(std::string(t.name()));
    const std::vector<uint8_t> want = bytes_of(f.tensor(std::string(t.name()) + ".q"));
    const int64_t rb = t.row_bytes(K);
    ASSERT_EQ(int64_t(want.size()), rows * rb);
    std::vector<uint8_t> got(want.size(), 0xAB);
    for (int64_t r = 0; r < rows; ++r) {
      t.quantize_ref(xs.data() + r * K, got.data() + r * rb, K);
      const bool same = std::equal(got.begin() + r * rb, got.begin() + (r + 1) * rb, want.begin() + r * rb);
      if (!same) {
        int64_t at = 0;
        while (got[size_t(r * rb + at)] == want[size_t(r * rb + at)]) ++at;
        ADD_FAILURE() << "row " << r << " (" << (size_t(r) < cases.size() ? cases[size_t(r)] : "random")
                      << ") differs first at byte " << at << " (block " << at / t.type_size() << ", offset "
                      << at % t.type_size() << "): " << int(got[size_t(r * rb + at)]) << " vs "
                      << int(want[size_t(r * rb + at)]);
      }
    }
  }
}

// Round trip: dequantize(quantize(x)) is close to x, within what each type's bits allow.
TEST(GGUFQuantize, RoundTripErrorWithinTheTypesBounds) {
  // RMS error / RMS of x on N(0,1) rows, measured with ggml and rounded up (ggml's own
  // test-quantize-fns uses 0.002 (q8-ish) .. 0.0075 for its absolute MSE on a cosine; ours is relative).
  const std::pair<GGMLType, double> bounds[] = {
      {GGMLType::F32, 0.0},      {GGMLType::F16, 4e-4},     {GGMLType::BF16, 3e-3},
      {GGMLType::Q8_0, 6e-3},    {GGMLType::Q5_0, 6e-2},    {GGMLType::Q5_1, 5e-2},
      {GGMLType::Q4_0, 1.2e-1},  {GGMLType::Q4_1, 1.0e-1},  {GGMLType::Q6_K, 2.5e-2},
      {GGMLType::Q5_K, 4.5e-2},  {GGMLType::Q4_K, 9e-2},    {GGMLType::Q3_K, 1.8e-1},
      {GGMLType::Q2_K, 3.5e-1},  {GGMLType::IQ4_NL, 9e-2},  {GGMLType::IQ4_XS, 9e-2}};
  std::mt19937 rng(5);
  std::normal_distribution<float> nd;
  const int64_t n = 4096;
  std::vector<float> x(static_cast<size_t>(n)), y(static_cast<size_t>(n));
  for (float& v : x) v = nd(rng);
  double sx = 0;
  for (float v : x) sx += double(v) * v;
  for (auto [type, bound] : bounds) {
    const TypeTraits& t = *find_type(type);
    std::vector<uint8_t> q(size_t(t.row_bytes(n)));
    t.quantize_ref(x.data(), q.data(), n);
    t.dequantize_ref(q.data(), y.data(), n);
    double se = 0;
    for (int64_t i = 0; i < n; ++i) se += (double(y[size_t(i)]) - x[size_t(i)]) * (double(y[size_t(i)]) - x[size_t(i)]);
    const double rel = std::sqrt(se / sx);
    EXPECT_LE(rel, bound) << t.name();
    if (bound > 0) {
      EXPECT_GT(rel, bound / 20) << t.name() << ": suspiciously exact";
    }
  }
}

// The SIMD dequantizers against the scalar reference on many random blocks (any byte pattern is a
// valid block; scales drawn from the whole finite f16 range).
TEST(GGUFDequantize, SimdMatchesScalarReference) {
  // Every SIMD target this CPU runs (e.g. AVX2 and the portable EMU128 here; AVX-512 where present).
  std::vector<int64_t> targets = hwy::SupportedAndGeneratedTargets();
  ASSERT_FALSE(targets.empty());
  for (int64_t target : targets) {
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(hwy::TargetName(target));
    std::mt19937 rng(11);
    int checked = 0;
    for (const TypeTraits& t : supported_types()) {
      if (!backend::cpu::gguf_simd_dequantizer(t.type)) continue;
      ++checked;
      SCOPED_TRACE(std::string(t.name()));
      const int64_t nblocks = 257;
      std::vector<uint8_t> blocks(size_t(nblocks * t.type_size()));
      for (auto& b : blocks) b = uint8_t(rng());
      const int64_t n = nblocks * t.block_size();
      std::vector<float> a(static_cast<size_t>(n)), b(static_cast<size_t>(n));
      t.dequantize_ref(blocks.data(), a.data(), n);
      backend::cpu::gguf_simd_dequantizer(t.type)(blocks.data(), b.data(), n);
      EXPECT_TRUE(same_floats(b.data(), a.data(), size_t(n)));
      // Odd block counts and offsets (rows start at any block boundary).
      t.dequantize_ref(blocks.data() + t.type_size(), a.data(), t.block_size() * 3);
      backend::cpu::gguf_simd_dequantizer(t.type)(blocks.data() + t.type_size(), b.data(), t.block_size() * 3);
      EXPECT_TRUE(same_floats(b.data(), a.data(), size_t(t.block_size() * 3)));
    }
    EXPECT_GE(checked, 4);
  }
  hwy::SetSupportedTargetsForTest(0);  // back to the CPU's own targets
  for (GGMLType t : {GGMLType::Q8_0, GGMLType::Q4_0, GGMLType::Q4_K, GGMLType::Q6_K})
    EXPECT_NE(backend::cpu::gguf_simd_dequantizer(t), nullptr);
}

}  // namespace
