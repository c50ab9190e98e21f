// diffq::Generator / randn against torch 2.15's CPU generator (tests/fixtures/tiny-flux/reference/
// noise.safetensors, made by tools/reference/make_tiny_flux.py). Bit-exact comparisons.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "diffq/error.h"
#include "core/random.h"
#include "io/safetensors.h"

namespace {

using diffq::DType;
using diffq::Generator;
using diffq::Tensor;

const char* kNoise = DIFFQ_SOURCE_DIR "/tests/fixtures/tiny-flux/reference/noise.safetensors";

// Raw element bits of a contiguous f32 / bf16 tensor.
std::vector<uint32_t> raw_bits(const Tensor& t) {
  Tensor c = t.contiguous();
  std::vector<uint32_t> out(static_cast<size_t>(c.numel()));
  if (c.dtype() == DType::f32) {
    std::memcpy(out.data(), c.data_ptr(), c.nbytes());
  } else {
    const auto* p = c.data<uint16_t>();
    for (size_t i = 0; i < out.size(); ++i) out[i] = p[i];
  }
  return out;
}

// Counts mismatching elements and reports the first few.
int64_t mismatches(const std::vector<uint32_t>& got, const std::vector<uint32_t>& want,
                   const std::string& what) {
  EXPECT_EQ(got.size(), want.size()) << what;
  int64_t bad = 0;
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    if (got[i] != want[i]) {
      if (bad < 5) ADD_FAILURE() << what << " element " << i << ": got 0x" << std::hex << got[i]
                                 << " want 0x" << want[i] << std::dec;
      ++bad;
    }
  }
  return bad;
}

TEST(Random, EngineIsStdMt19937OnTheLow32BitsOfTheSeed) {
  Generator g(5489);
  uint32_t v = 0;
  for (int i = 0; i < 10000; ++i) v = g.random();
  EXPECT_EQ(v, 4123659995u);  // the C++ standard's check value for mt19937
  Generator a((uint64_t{7} << 32) | 42), b(42);
  EXPECT_EQ(a.random(), b.random());
  EXPECT_EQ(a.initial_seed(), (uint64_t{7} << 32) | 42);
}

TEST(Random, Random64TakesTheFirstDrawAsHighHalf) {
  Generator a(3), b(3);
  const uint64_t hi = b.random(), lo = b.random();
  EXPECT_EQ(a.random64(), (hi << 32) | lo);
}

TEST(Random, EveryNoiseFixtureTensorBitExact) {
  auto file = diffq::io::SafetensorsFile::open(kNoise);
  const std::vector<std::pair<const char*, diffq::Shape>> shapes = {
      {"latent", {1, 4, 16, 16}}, {"odd", {2, 16, 3, 5}}, {"small", {1, 15}}};
  int checked = 0;
  for (uint64_t seed : {0, 42}) {
    for (const auto& [name, shape] : shapes) {
      for (DType dt : {DType::f32, DType::bf16}) {
        const std::string key = "seed" + std::to_string(seed) + "." + name + "." +
                                 (dt == DType::f32 ? "f32" : "bf16");
        SCOPED_TRACE(key);
        Tensor want = file.tensor(key);
        Generator g(seed);
        Tensor got = diffq::randn_tensor(shape, g, dt);
        ASSERT_EQ(got.shape(), want.shape());
        ASSERT_EQ(got.dtype(), want.dtype());
        EXPECT_EQ(mismatches(raw_bits(got), raw_bits(want), key), 0);
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 12);
}

TEST(Random, Flux1024HeadAndTailBitExact) {
  auto file = diffq::io::SafetensorsFile::open(kNoise);
  for (DType dt : {DType::f32, DType::bf16}) {
    Generator g(0);
    Tensor full = diffq::randn({1, 16, 128, 128}, g, dt);
    Tensor flat = full.reshape({full.numel()});
    const std::string p = std::string("seed0.flux1024.") + (dt == DType::f32 ? "f32" : "bf16");
    EXPECT_EQ(mismatches(raw_bits(flat.slice(0, 0, 256)), raw_bits(file.tensor(p + ".head")),
                         p + ".head"), 0);
    EXPECT_EQ(mismatches(raw_bits(flat.slice(0, flat.numel() - 256, flat.numel())),
                         raw_bits(file.tensor(p + ".tail")), p + ".tail"), 0);
  }
}

TEST(Random, ScalarPathCachesTheSineAcrossCalls) {
  // Two 1-element draws = the first two elements of one 2-element draw (torch's Box-Muller cache).
  Generator a(9), b(9);
  Tensor two = diffq::randn({2}, a);
  Tensor x = diffq::randn({1}, b), y = diffq::randn({1}, b);
  EXPECT_EQ(two.to_f32_vector()[0], x.item());
  EXPECT_EQ(two.to_f32_vector()[1], y.item());
  // manual_seed clears the cache.
  b.manual_seed(9);
  EXPECT_EQ(diffq::randn({1}, b).item(), x.item());
}

TEST(Random, BatchOfGeneratorsDrawsOneRowEach) {
  std::vector<Generator> gens{Generator(1), Generator(2)};
  Tensor both = diffq::randn_tensor({2, 4, 4, 2}, gens);
  Generator g1(1), g2(2);
  auto r1 = diffq::randn({1, 4, 4, 2}, g1).to_f32_vector();
  auto r2 = diffq::randn({1, 4, 4, 2}, g2).to_f32_vector();
  auto v = both.to_f32_vector();
  r1.insert(r1.end(), r2.begin(), r2.end());
  EXPECT_EQ(v, r1);
  std::vector<Generator> one_short{Generator(1)};
  EXPECT_THROW(diffq::randn_tensor({2, 4}, one_short), diffq::Error);
}

// torch.randn(40, seed 0) in processes with ATEN_CPU_CAPABILITY=default (torch's scalar normal kernel) and
// =avx2 (its vectorised one), from tools/reference/make_reference_values.py. 40 is no multiple of 16: the last
// 16 values are redone. The two kernels differ in the last bits; diffq has both.
TEST(Random, BothKernelsMatchTorchPerCpuCapability) {
  auto file = diffq::io::SafetensorsFile::open(DIFFQ_SOURCE_DIR "/tests/fixtures/reference-values/values.safetensors");
  const auto scalar_ref = raw_bits(file.tensor("randn.seed0.n40.default"));
  const auto avx2_ref = raw_bits(file.tensor("randn.seed0.n40.avx2"));
  ASSERT_EQ(scalar_ref.size(), 40u);
  ASSERT_NE(scalar_ref, avx2_ref);
  Generator g(0);
  EXPECT_EQ(mismatches(raw_bits(diffq::randn({40}, g, DType::f32, diffq::RandnKernel::scalar)), scalar_ref,
                       "scalar kernel"), 0);
  Generator g2(0);
  EXPECT_EQ(mismatches(raw_bits(diffq::randn({40}, g2)), avx2_ref, "avx2 kernel"), 0);
}

TEST(Random, RejectsIntegerDtype) {
  Generator g(0);
  EXPECT_THROW(diffq::randn({4}, g, DType::i32), diffq::Error);
}

}  // namespace
