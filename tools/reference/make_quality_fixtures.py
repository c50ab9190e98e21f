#!/usr/bin/env python3
"""tests/fixtures/quality/: fixed pairs of images with scikit-image's PSNR and SSIM of them, the oracle of
diffq's src/metrics (diffq::psnr, diffq::ssim; diffq bench --quality).

SSIM as Wang et al. 2004: skimage.metrics.structural_similarity(gaussian_weights=True, sigma=1.5,
use_sample_covariance=False, data_range=L) — 11x11 Gaussian window, C1=(0.01 L)^2, C2=(0.03 L)^2 — per channel,
averaged (channel_axis). The tensors are stored as float32; skimage runs on their float64 values, so the
expected numbers are those of exactly the stored pixels.

pairs.safetensors:
  rgb_ref, rgb_test   [20, 24, 3] in [0, 1] (channels last): a smooth colour pattern; the test is it blurred a
                      little, shifted by a pixel, with noise, clipped to [0, 1]          -> data_range 1
  lat_ref, lat_test   [4, 16, 13] (channels first, unbounded, like latents): N(0, 1) smoothed; the test adds
                      N(0, 0.3) noise                                           -> data_range max(ref) - min(ref)
expected.json: psnr, ssim (channel mean) and ssim per channel of each pair, and the data ranges.
"""
from __future__ import annotations

import _common

import numpy as np


def main() -> None:
    _common.deterministic(0)
    import torch
    from scipy.ndimage import gaussian_filter
    from skimage import __version__ as skv
    from skimage.metrics import peak_signal_noise_ratio, structural_similarity

    rng = np.random.default_rng(21)
    h, w = 20, 24
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float64)
    rgb_ref = np.stack([0.5 + 0.4 * np.sin(xx / 3.0) * np.cos(yy / 4.0),
                        (xx + yy) / (h + w),
                        0.5 + 0.3 * np.cos((xx - 2 * yy) / 5.0)], axis=-1)
    rgb_test = gaussian_filter(np.roll(rgb_ref, 1, axis=1), sigma=(0.6, 0.6, 0))
    rgb_test = np.clip(rgb_test + rng.normal(0, 0.04, rgb_ref.shape), 0, 1)
    lat_ref = gaussian_filter(rng.normal(0, 1, (4, 16, 13)), sigma=(0, 1.0, 1.0)) * 2.0
    lat_test = lat_ref + rng.normal(0, 0.3, lat_ref.shape)

    pairs = {k: v.astype(np.float32) for k, v in
             dict(rgb_ref=rgb_ref, rgb_test=rgb_test, lat_ref=lat_ref, lat_test=lat_test).items()}
    x = {k: v.astype(np.float64) for k, v in pairs.items()}

    def ssim(test, ref, L, axis):
        kw = dict(gaussian_weights=True, sigma=1.5, use_sample_covariance=False, data_range=L)
        per = [float(structural_similarity(np.take(test, c, axis), np.take(ref, c, axis), **kw))
               for c in range(ref.shape[axis])]
        mean = float(structural_similarity(test, ref, channel_axis=axis, **kw))
        assert abs(mean - np.mean(per)) < 1e-12
        return mean, per

    expected = {"skimage": skv}
    for name, axis in (("rgb", -1), ("lat", 0)):
        ref, test = x[f"{name}_ref"], x[f"{name}_test"]
        L = 1.0 if name == "rgb" else float(ref.max() - ref.min())
        mean, per = ssim(test, ref, L, axis)
        expected[name] = {"data_range": L, "psnr": float(peak_signal_noise_ratio(ref, test, data_range=L)),
                          "ssim": mean, "ssim_per_channel": per}

    out = _common.fresh_dir(_common.FIXTURES / "quality")
    _common.save_tensors(out / "pairs.safetensors", {k: torch.from_numpy(v) for k, v in pairs.items()})
    _common.write_json(out / "expected.json", expected)
    print(expected)


if __name__ == "__main__":
    main()
