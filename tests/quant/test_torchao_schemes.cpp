// torchao 0.18 schemes on the CPU, bit for bit: each fixture case (tools/reference/make_quant_torchao.py)
// holds a float weight, the torchao tensor's qdata/scale/zero_point, its dequantize() and, where torchao
// runs F.linear on the CPU, an input/bias/output. Configs are parsed from torchao's config_to_dict JSON.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "backend/cpu/quant/torchao_int4_dequant.h"
#include "diffq/error.h"
#include "io/safetensors.h"
#include "quant/torchao/int4_weight.h"
#include "quant/torchao/torchao.h"

namespace {

using namespace diffq;
namespace tao = diffq::quant::torchao;

std::filesystem::path fixtures() { return std::filesystem::path(DIFFQ_SOURCE_DIR) / "tests/fixtures/quant/torchao"; }

const io::SafetensorsFile& schemes() {
  static const io::SafetensorsFile f = io::SafetensorsFile::open(fixtures() / "schemes.safetensors");
  return f;
}
const nlohmann::json& cases() {
  static const nlohmann::json j = [] {
    std::ifstream in(fixtures() / "schemes.json");
    return nlohmann::json::parse(in);
  }();
  return j;
}

// Same dtype, shape and bytes (signed zeros count). NaN matches NaN whatever its sign/payload: torch's
// NaN bits depend on which SIMD path produced them (0/0 on x86 gives -NaN, its vector bf16 cast keeps
// the sign, the scalar one does not), so the payload is not part of torchao's semantics.
::testing::AssertionResult same_bits(const Tensor& got, const Tensor& want, const std::string& what) {
  if (got.dtype() != want.dtype())
    return ::testing::AssertionFailure() << what << ": dtype " << dtype_name(got.dtype()) << " vs " << dtype_name(want.dtype());
  if (got.numel() != want.numel() || (got.shape() != want.shape() && !(got.numel() == 1 && want.numel() == 1)))
    return ::testing::AssertionFailure() << what << ": shape " << shape_str(got.shape()) << " vs " << shape_str(want.shape());
  const Tensor a = got.contiguous(), b = want.contiguous();
  const size_t es = dtype_size(a.dtype());
  const auto* pa = static_cast<const uint8_t*>(a.data_ptr());
  const auto* pb = static_cast<const uint8_t*>(b.data_ptr());
  int64_t bad = 0, first = -1;
  const bool fl = is_floating(a.dtype());
  const std::vector<float> af = fl ? a.to_f32_vector() : std::vector<float>(), bf = fl ? b.to_f32_vector() : std::vector<float>();
  for (int64_t i = 0; i < a.numel(); ++i)
    if (std::memcmp(pa + i * es, pb + i * es, es) != 0 && !(fl && std::isnan(af[size_t(i)]) && std::isnan(bf[size_t(i)]))) {
      if (first < 0) first = i;
      ++bad;
    }
  if (bad == 0) return ::testing::AssertionSuccess();
  const auto av = a.to_f32_vector(), bv = b.to_f32_vector();
  return ::testing::AssertionFailure() << what << ": " << bad << " of " << a.numel() << " elements differ, first at "
                                       << first << ": " << av[size_t(first)] << " vs " << bv[size_t(first)];
}

// max |a - b| / max |b| over elements where both are finite; NaN positions must agree.
double rel_err(const Tensor& got, const Tensor& want, int64_t* nan_mismatch) {
  const auto a = got.to_f32_vector(), b = want.to_f32_vector();
  double num = 0, den = 0;
  *nan_mismatch = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) || std::isnan(b[i])) {
      *nan_mismatch += std::isnan(a[i]) != std::isnan(b[i]);
      continue;
    }
    num = std::max(num, std::abs(double(a[i]) - b[i]));
    den = std::max(den, std::abs(double(b[i])));
  }
  return den > 0 ? num / den : num;
}

class TorchaoScheme : public ::testing::TestWithParam<std::string> {};

TEST_P(TorchaoScheme, QuantizeAndDequantizeAreBitExact) {
  const std::string name = GetParam();
  const nlohmann::json& c = cases()[name];
  const tao::Config cfg = tao::Config::from_json(c["config"]);
  const Tensor w = schemes().tensor(name + ".w");
  ASSERT_TRUE(tao::should_quantize("layer", w.shape(), cfg)) << name;
  auto qw = tao::quantize(w, cfg);
  auto* tw = dynamic_cast<const tao::TorchaoWeight*>(qw.get());
  ASSERT_NE(tw, nullptr);
  EXPECT_EQ(tw->tensor_class(), c["class"].get<std::string>()) << name;
  int checked = 0;
  for (auto& [attr, t] : tw->tensor_data()) {
    const std::string key = name + "." + attr;
    ASSERT_TRUE(schemes().contains(key)) << key << " is not in the fixture";
    EXPECT_TRUE(same_bits(t, schemes().tensor(key), key));
    ++checked;
  }
  EXPECT_GE(checked, 2);
  const Tensor deq = schemes().tensor(name + ".deq");
  EXPECT_TRUE(same_bits(qw->dequantize(deq.dtype()), deq, name + ".deq"));

  // Round trip through the on-disk layout: save -> load gives the same dequantization.
  tao::StateDict sd;
  tao::Metadata md;
  tao::save(*qw, "blk.lin", sd, &md);
  auto back = tao::load(sd, "blk.lin", w.shape(), cfg, &md);
  EXPECT_TRUE(same_bits(back->dequantize(deq.dtype()), deq, name + " (saved and loaded)"));
  auto back_nomd = tao::load(sd, "blk.lin", w.shape(), cfg, nullptr);
  if (w.dtype() == DType::bf16) {
    EXPECT_TRUE(same_bits(back_nomd->dequantize(deq.dtype()), deq, name + " (loaded without metadata)"));
  }
}

TEST_P(TorchaoScheme, LinearMatchesTorchaoForward) {
  const std::string name = GetParam();
  const nlohmann::json& c = cases()[name];
  if (!c["linear"].get<bool>()) GTEST_SKIP() << "torchao cannot run this F.linear on the CPU";
  const tao::Config cfg = tao::Config::from_json(c["config"]);
  auto qw = tao::quantize(schemes().tensor(name + ".w"), cfg);
  const Tensor x = schemes().tensor(name + ".x"), b = schemes().tensor(name + ".bias"), y = schemes().tensor(name + ".y");
  const Tensor got = qw->linear(x, b);
  ASSERT_EQ(got.shape(), y.shape());
  ASSERT_EQ(got.dtype(), y.dtype());
  if (cfg.kind == tao::Kind::Int8DynamicActivationInt8Weight) {
    EXPECT_TRUE(same_bits(got, y, name + ".y"));  // integer GEMM + the same rounding steps: exact
    return;
  }
  int64_t nan_mismatch = 0;
  const double err = rel_err(got, y, &nan_mismatch);
  EXPECT_EQ(nan_mismatch, 0) << name;
  EXPECT_LE(err, y.dtype() == DType::f32 ? 1e-5 : 1e-2) << name;
}

std::vector<std::string> case_names() {
  std::vector<std::string> v;
  for (auto& [k, _] : cases().items()) v.push_back(k);
  return v;
}

INSTANTIATE_TEST_SUITE_P(Fixture, TorchaoScheme, ::testing::ValuesIn(case_names()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace

namespace {

// The vectorised Int4Tensor row dequantizer against its scalar reference, bit for bit, over every
// byte value and several group sizes / row lengths (SIMD body + scalar tail).
TEST(TorchaoInt4Kernel, SimdEqualsScalarReference) {
  for (int64_t g : {32, 64, 128, 256}) {
    for (int64_t k : {g, 3 * g, int64_t(1024)}) {
      if (k % g) continue;
      std::vector<uint8_t> packed(static_cast<size_t>(k / 2));
      for (size_t i = 0; i < packed.size(); ++i) packed[i] = uint8_t(i * 37 + g);
      std::vector<float> scale(static_cast<size_t>(k / g)), zero(static_cast<size_t>(k / g));
      for (size_t i = 0; i < scale.size(); ++i) scale[i] = 0.0137f * float(i + 1), zero[i] = -0.05f + 0.011f * float(i);
      std::vector<float> a(static_cast<size_t>(k)), b(static_cast<size_t>(k));
      diffq::backend::cpu::dequant_int4_row(packed.data(), k, g, scale.data(), zero.data(), a.data());
      diffq::quant::torchao::dequant_int4_row_reference(packed.data(), k, g, scale.data(), zero.data(), b.data());
      ASSERT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4)) << "g=" << g << " k=" << k;
    }
  }
}

}  // namespace
