// PSNR and SSIM (include/diffq/quality.h, src/metrics/) against scikit-image's values on the fixed pairs of
// tests/fixtures/quality (tools/reference/make_quality_fixtures.py), and the separable SSIM against its
// direct 2-D scalar reference.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "diffq/error.h"
#include "diffq/quality.h"
#include "io/safetensors.h"
#include "metrics/ssim.h"

namespace {

using diffq::Tensor;
const std::string kDir = DIFFQ_SOURCE_DIR "/tests/fixtures/quality/";

const nlohmann::json& expected() {
  static const nlohmann::json j = [] {
    std::ifstream in(kDir + "expected.json");
    return nlohmann::json::parse(in);
  }();
  return j;
}

Tensor pair(const std::string& name) {
  static const auto f = diffq::io::SafetensorsFile::open(kDir + "pairs.safetensors");
  return f.tensor(name);
}

// The stored values are float32; skimage ran on their float64 values, as diffq does: agreement to rounding.
constexpr double kTol = 1e-12;

TEST(Quality, RgbPairMatchesScikitImage) {
  const auto& e = expected().at("rgb");
  const Tensor ref = pair("rgb_ref"), test = pair("rgb_test");  // [H, W, 3]
  EXPECT_NEAR(diffq::psnr(test, ref, 1.0), e.at("psnr").get<double>(), 1e-10);
  // channels last -> [3, H, W] (a view): per-channel SSIM averaged, as skimage's channel_axis=-1.
  const double s = diffq::ssim(test.permute({2, 0, 1}), ref.permute({2, 0, 1}), 1.0);
  EXPECT_NEAR(s, e.at("ssim").get<double>(), kTol);
  for (int64_t c = 0; c < 3; ++c)
    EXPECT_NEAR(diffq::ssim(test.select(2, c), ref.select(2, c), 1.0), e.at("ssim_per_channel")[c].get<double>(), kTol)
        << "channel " << c;
}

TEST(Quality, LatentPairWithItsDataRangeMatchesScikitImage) {
  const auto& e = expected().at("lat");
  const Tensor ref = pair("lat_ref"), test = pair("lat_test");  // [4, 16, 13]
  const double L = e.at("data_range").get<double>();
  EXPECT_NEAR(diffq::psnr(test, ref, L), e.at("psnr").get<double>(), 1e-10);
  EXPECT_NEAR(diffq::ssim(test, ref, L), e.at("ssim").get<double>(), kTol);
  // A batch dim in front changes nothing (every leading index is a plane).
  EXPECT_NEAR(diffq::ssim(test.unsqueeze(0), ref.unsqueeze(0), L), e.at("ssim").get<double>(), kTol);
}

TEST(Quality, IdenticalInputsGiveInfinitePsnrAndSsimOne) {
  const Tensor ref = pair("lat_ref");
  EXPECT_TRUE(std::isinf(diffq::psnr(ref, ref, 1.0)));
  EXPECT_NEAR(diffq::ssim(ref, ref, 4.0), 1.0, 1e-15);
}

TEST(Quality, SeparableSsimEqualsTheDirectWindowReference) {
  std::mt19937 rng(7);
  std::normal_distribution<double> n(0, 1);
  for (auto [H, W] : {std::pair<int64_t, int64_t>{11, 11}, {23, 40}, {37, 12}}) {
    std::vector<double> x(H * W), y(H * W);
    for (int64_t i = 0; i < H * W; ++i) {
      x[i] = n(rng);
      y[i] = 0.7 * x[i] + 0.5 * n(rng);
    }
    const double fast = diffq::metrics::ssim_plane(x.data(), y.data(), H, W, 6.0);
    const double slow = diffq::metrics::ssim_plane_reference(x.data(), y.data(), H, W, 6.0);
    EXPECT_NEAR(fast, slow, 1e-13) << H << "x" << W;
    EXPECT_LT(fast, 0.99);
  }
  double sum = 0;
  for (double t : diffq::metrics::ssim_gaussian_taps()) sum += t;
  EXPECT_NEAR(sum, 1.0, 1e-15);
}

TEST(Quality, BadInputsAreClearErrors) {
  const Tensor ref = pair("rgb_ref");
  try {
    diffq::ssim(ref, ref, 1.0);  // [20, 24, 3]: the last dim is 3 < 11
    FAIL() << "no error";
  } catch (const diffq::Error& e) {
    EXPECT_NE(std::string(e.what()).find("H, W >= 11"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(diffq::ssim_fits(ref.shape()));
  EXPECT_THROW(diffq::psnr(ref, pair("lat_ref"), 1.0), diffq::Error);  // shapes differ
  EXPECT_THROW(diffq::psnr(ref, ref, 0.0), diffq::Error);
}

}  // namespace
