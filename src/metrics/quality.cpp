// include/diffq/quality.h over Tensors: values read in logical order as float64 (any dtype, any strides),
// then PSNR over all elements and SSIM per [H, W] plane (src/metrics/ssim.cpp).
#include <cmath>
#include <limits>
#include <vector>

#include "diffq/error.h"
#include "diffq/quality.h"
#include "metrics/ssim.h"

namespace diffq {

namespace {

void check_pair(const Tensor& test, const Tensor& ref, const char* ctx) {
  check(test.defined() && ref.defined(), ctx, "both tensors must be defined");
  check(test.shape() == ref.shape(), ctx, "shapes differ: ", shape_str(test.shape()), " vs the reference's ",
        shape_str(ref.shape()));
  check(ref.numel() > 0, ctx, "empty tensors");
}

}  // namespace

double mean_squared_error(const Tensor& test, const Tensor& ref) {
  check_pair(test, ref, "psnr");
  const std::vector<double> a = test.to_f64_vector(), b = ref.to_f64_vector();
  double sum = 0;
  for (size_t i = 0; i < a.size(); ++i) sum += (a[i] - b[i]) * (a[i] - b[i]);
  return sum / double(a.size());
}

double psnr(const Tensor& test, const Tensor& ref, double data_range) {
  check(data_range > 0 && std::isfinite(data_range), "psnr", "data_range must be positive, got ", data_range);
  const double mse = mean_squared_error(test, ref);
  if (mse == 0) return std::numeric_limits<double>::infinity();
  return 10.0 * std::log10(data_range * data_range / mse);
}

bool ssim_fits(const Shape& s) {
  return s.size() >= 2 && s[s.size() - 1] >= kSsimWindow && s[s.size() - 2] >= kSsimWindow;
}

double ssim(const Tensor& test, const Tensor& ref, double data_range) {
  check_pair(test, ref, "ssim");
  check(ssim_fits(ref.shape()), "ssim", "needs [..., H, W] with H, W >= ", kSsimWindow, ", got ",
        shape_str(ref.shape()));
  const std::vector<double> a = test.to_f64_vector(), b = ref.to_f64_vector();
  const int64_t H = ref.size(-2), W = ref.size(-1), planes = ref.numel() / (H * W);
  double total = 0;
  for (int64_t p = 0; p < planes; ++p)
    total += metrics::ssim_plane(a.data() + p * H * W, b.data() + p * H * W, H, W, data_range);
  return total / double(planes);
}

}  // namespace diffq
