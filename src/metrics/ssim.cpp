// SSIM per plane: Wang et al. 2004 with skimage's conventions (gaussian_weights=True, sigma 1.5, truncate 3.5,
// use_sample_covariance=False); only the positions where the 11 x 11 window is inside the plane count, which
// is what skimage's crop of the 5-pixel border leaves (its reflect padding never reaches those positions).
#include "metrics/ssim.h"

#include <cmath>
#include <vector>

#include "diffq/error.h"

namespace diffq::metrics {

namespace {

constexpr int64_t kRadius = 5;
constexpr int64_t kTaps = 2 * kRadius + 1;

// S at one position from the weighted moments of its window.
double ssim_at(double ux, double uy, double uxx, double uyy, double uxy, const SsimConstants& c) {
  const double vx = uxx - ux * ux, vy = uyy - uy * uy, vxy = uxy - ux * uy;
  return ((2 * ux * uy + c.c1) * (2 * vxy + c.c2)) / ((ux * ux + uy * uy + c.c1) * (vx + vy + c.c2));
}

void check_plane(int64_t H, int64_t W, double data_range) {
  check(H >= kTaps && W >= kTaps, "ssim", "a plane of ", H, "x", W, " is smaller than the ", kTaps, "x", kTaps,
        " window");
  check(data_range > 0 && std::isfinite(data_range), "ssim", "data_range must be positive, got ", data_range);
}

}  // namespace

const std::array<double, 11>& ssim_gaussian_taps() {
  static const std::array<double, 11> taps = [] {
    std::array<double, 11> t{};
    double sum = 0;
    for (int64_t i = 0; i < kTaps; ++i) {
      const double x = double(i - kRadius);
      t[i] = std::exp(-0.5 / (1.5 * 1.5) * x * x);
      sum += t[i];
    }
    for (double& v : t) v /= sum;
    return t;
  }();
  return taps;
}

SsimConstants::SsimConstants(double L) : c1((0.01 * L) * (0.01 * L)), c2((0.03 * L) * (0.03 * L)) {}

double ssim_plane(const double* x, const double* y, int64_t H, int64_t W, double data_range) {
  check_plane(H, W, data_range);
  const auto& g = ssim_gaussian_taps();
  const SsimConstants c(data_range);
  const int64_t Wo = W - 2 * kRadius;  // output columns
  // Horizontal pass per row: the five moments filtered along W, valid columns only.  // [H, Wo] each
  std::vector<double> hx(H * Wo), hy(H * Wo), hxx(H * Wo), hyy(H * Wo), hxy(H * Wo);
  for (int64_t r = 0; r < H; ++r) {
    const double* xr = x + r * W;
    const double* yr = y + r * W;
    for (int64_t j = 0; j < Wo; ++j) {
      double sx = 0, sy = 0, sxx = 0, syy = 0, sxy = 0;
      for (int64_t k = 0; k < kTaps; ++k) {
        const double a = xr[j + k], b = yr[j + k], w = g[k];
        sx += w * a;
        sy += w * b;
        sxx += w * a * a;
        syy += w * b * b;
        sxy += w * a * b;
      }
      const int64_t o = r * Wo + j;
      hx[o] = sx, hy[o] = sy, hxx[o] = sxx, hyy[o] = syy, hxy[o] = sxy;
    }
  }
  // Vertical pass on the valid rows, then S, summed.
  double total = 0;
  const int64_t Ho = H - 2 * kRadius;
  for (int64_t i = 0; i < Ho; ++i)
    for (int64_t j = 0; j < Wo; ++j) {
      double ux = 0, uy = 0, uxx = 0, uyy = 0, uxy = 0;
      for (int64_t k = 0; k < kTaps; ++k) {
        const int64_t o = (i + k) * Wo + j;
        const double w = g[k];
        ux += w * hx[o];
        uy += w * hy[o];
        uxx += w * hxx[o];
        uyy += w * hyy[o];
        uxy += w * hxy[o];
      }
      total += ssim_at(ux, uy, uxx, uyy, uxy, c);
    }
  return total / double(Ho * Wo);
}

double ssim_plane_reference(const double* x, const double* y, int64_t H, int64_t W, double data_range) {
  check_plane(H, W, data_range);
  const auto& g = ssim_gaussian_taps();
  const SsimConstants c(data_range);
  double total = 0;
  int64_t n = 0;
  for (int64_t i = kRadius; i < H - kRadius; ++i)
    for (int64_t j = kRadius; j < W - kRadius; ++j) {
      double ux = 0, uy = 0, uxx = 0, uyy = 0, uxy = 0;
      for (int64_t di = -kRadius; di <= kRadius; ++di)
        for (int64_t dj = -kRadius; dj <= kRadius; ++dj) {
          const double w = g[di + kRadius] * g[dj + kRadius];
          const double a = x[(i + di) * W + j + dj], b = y[(i + di) * W + j + dj];
          ux += w * a;
          uy += w * b;
          uxx += w * a * a;
          uyy += w * b * b;
          uxy += w * a * b;
        }
      total += ssim_at(ux, uy, uxx, uyy, uxy, c);
      ++n;
    }
  return total / double(n);
}

}  // namespace diffq::metrics
