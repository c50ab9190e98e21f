// Fidelity of an output against a reference output of the same seed (diffq bench --quality): PSNR and SSIM.
// LPIPS needs a trained network (AlexNet/VGG features) and is not provided.
//
//   // images [N, H, W, 3] in [0, 1] (GenerateResult::pixels_f32): channels first, data range 1
//   double s = diffq::ssim(got.permute({0, 3, 1, 2}), ref.permute({0, 3, 1, 2}), 1.0);
//   double p = diffq::psnr(got, ref, 1.0);
#pragma once

#include <cstdint>

#include "diffq/tensor.h"

namespace diffq {

// Peak signal-to-noise ratio in dB over every element: 10 log10(data_range^2 / mean((test - ref)^2)), as
// skimage.metrics.peak_signal_noise_ratio(ref, test, data_range=data_range). +infinity when the tensors are
// equal. Same shape, any dtype and layout, CPU.
double psnr(const Tensor& test, const Tensor& ref, double data_range);
double mean_squared_error(const Tensor& test, const Tensor& ref);

// The SSIM window: 11 x 11 (a Gaussian of sigma 1.5 truncated at 3.5 sigma, normalised to sum 1).
inline constexpr int64_t kSsimWindow = 11;

// Mean structural similarity (Wang, Bovik, Sheikh, Simoncelli 2004) with the Gaussian window above,
// C1 = (0.01 L)^2, C2 = (0.03 L)^2 (L = data_range), population (co)variances, averaged over the positions
// where the whole window lies inside the plane (the border of 5 is left out): exactly
// skimage.metrics.structural_similarity(gaussian_weights=True, sigma=1.5, use_sample_covariance=False,
// data_range=L). `test`, `ref`: [..., H, W], same shape: every leading index is one plane (a channel, a
// frame, a batch item); the result is the mean over planes (per-channel SSIM averaged, as skimage's
// channel_axis). Throws when H or W is under kSsimWindow (see ssim_fits).
double ssim(const Tensor& test, const Tensor& ref, double data_range);
bool ssim_fits(const Shape& shape);  // rank >= 2 and the last two dims >= kSsimWindow

}  // namespace diffq
