// SSIM on one plane (include/diffq/quality.h says which SSIM): the separable implementation the public
// diffq::ssim uses, and the direct 2-D scalar reference that tests hold it against.
#pragma once

#include <array>
#include <cstdint>

namespace diffq::metrics {

// The normalised 11-tap Gaussian (sigma 1.5, radius int(3.5 * 1.5 + 0.5) = 5), as scipy.ndimage builds it.
const std::array<double, 11>& ssim_gaussian_taps();

struct SsimConstants {
  double c1, c2;  // (0.01 L)^2, (0.03 L)^2
  explicit SsimConstants(double data_range);
};

// Mean SSIM of the plane x against y, both [H, W] row-major (H, W >= 11), over the (H - 10) x (W - 10)
// positions whose window lies inside. Separable filtering of x, y, x^2, y^2, xy; O(H W 11).
double ssim_plane(const double* x, const double* y, int64_t H, int64_t W, double data_range);

// The same, computed the slow way: for each position the 11 x 11 window weights w(i)w(j) applied directly
// (O(H W 121)): the oracle for ssim_plane.
double ssim_plane_reference(const double* x, const double* y, int64_t H, int64_t W, double data_range);

}  // namespace diffq::metrics
