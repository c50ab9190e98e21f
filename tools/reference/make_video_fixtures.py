"""Writes tests/fixtures/video/: animated WebP files encoded by libwebp's own animation encoder
(WebPAnimEncoder, through Pillow), which cuts frames into sub-rectangles at offsets and uses blending
and transparent pixels (ALPH), so they exercise the compositing of io/video_reader.cpp that diffq's own writer
(full-canvas key frames) never produces.

Run: cd tools/reference && CUDA_VISIBLE_DEVICES= HF_HUB_OFFLINE=1 ../../tools/.venv/bin/python make_video_fixtures.py

Files:
  lossless.webp       8 frames 32x48 (W x H), lossless, 50 ms each, loop 0
  lossy.webp          the same frames, lossy quality 90, durations 40/80 ms alternating, loop 3
  frames.safetensors  source  uint8 [8, 32, 48, 3]: the frames given to the encoder
                      lossy_libwebp uint8 [8, 32, 48, 3]: lossy.webp as libwebp's WebPAnimDecoder
                      (Pillow) decodes it, composited, RGB
  expected.json       frame count, size, durations, loop counts, Pillow / libwebp versions
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from PIL import Image, ImageSequence, features

import _common

OUT = _common.FIXTURES / "video"
F, H, W = 8, 32, 48


def source_frames() -> np.ndarray:
    """A static background (gradients) with a square moving over it: the encoder then emits
    sub-rectangles at offsets, blends them, and (lossy) marks unchanged pixels transparent (ALPH)."""
    y, x = np.mgrid[0:H, 0:W].astype(np.float64)
    r = 20 + 150 * x / (W - 1)
    g = 20 + 150 * y / (H - 1)
    b = 100 + 50 * np.sin((x + y) / 7.0)
    background = np.stack([r, g, b], -1)
    frames = np.zeros((F, H, W, 3), np.uint8)
    for f in range(F):
        img = background.copy()
        sx, sy = 4 + 3 * f, 2 + f
        img[sy : sy + 16, sx : sx + 16] = [230, 200, 50]
        frames[f] = np.clip(np.rint(img), 0, 255).astype(np.uint8)
    return frames


def main() -> None:
    _common.deterministic(0)
    out = _common.fresh_dir(OUT)
    src = source_frames()
    images = [Image.fromarray(fr, "RGB") for fr in src]

    lossless_durations = [50] * F
    images[0].save(out / "lossless.webp", save_all=True, append_images=images[1:], lossless=True,
                   duration=lossless_durations, loop=0, method=4)
    lossy_durations = [40 if i % 2 == 0 else 80 for i in range(F)]
    images[0].save(out / "lossy.webp", save_all=True, append_images=images[1:], lossless=False, quality=90,
                   duration=lossy_durations, loop=3, method=4)

    # The lossless file must decode to the source exactly (checks this script, not diffq).
    with Image.open(out / "lossless.webp") as im:
        back = np.stack([np.asarray(fr.convert("RGB")) for fr in ImageSequence.Iterator(im)])
    assert back.shape == src.shape and np.array_equal(back, src), "lossless.webp does not round-trip"
    with Image.open(out / "lossy.webp") as im:
        lossy = np.stack([np.asarray(fr.convert("RGB")) for fr in ImageSequence.Iterator(im)])
    assert lossy.shape == src.shape

    _common.save_tensors(out / "frames.safetensors",
                         {"source": torch.from_numpy(src), "lossy_libwebp": torch.from_numpy(lossy)})
    _common.write_json(out / "expected.json", {
        "frames": F, "height": H, "width": W,
        "lossless": {"durations_ms": lossless_durations, "loop": 0},
        "lossy": {"durations_ms": lossy_durations, "loop": 3},
        "pillow": Image.__version__ if hasattr(Image, "__version__") else "",
        "libwebp": features.version("webp"),
    })
    print(f"wrote {out} ({_common.dir_size(out)} bytes)")


if __name__ == "__main__":
    main()
