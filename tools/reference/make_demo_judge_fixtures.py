"""Logits of the demo model's judge (models/demo-flux-classifier, tools/train_demo/classifier.py) computed by
PyTorch on 12 procedural images, for tests/metrics/test_adherence_judge.cpp (diffq's C++ port of the CNN).

Writes tests/fixtures/demo-judge/: image_<i>.png (64x64 RGB: 8 clean renders + 4 with noise so no input is
flat), logits.safetensors (<head> [12, labels] float32) and labels.json (PyTorch's arg-max labels per image).
Run again after the judge is retrained.
"""
from __future__ import annotations

import sys

import numpy as np

from _common import FIXTURES, ROOT, deterministic, fresh_dir, save_tensors, write_json

sys.path.insert(0, str(ROOT / "tools" / "train_demo"))
import classifier as K  # noqa: E402
import dataset as D  # noqa: E402


def main() -> None:
    deterministic(0)
    import torch
    from PIL import Image

    out = fresh_dir(FIXTURES / "demo-judge")
    images, _, _ = D.make_arrays(12, seed=777)
    rng = np.random.default_rng(5)
    noisy = images[8:].astype(np.float64) + rng.normal(0, 20, images[8:].shape)
    images[8:] = np.clip(np.rint(noisy), 0, 255).astype(np.uint8)
    for i, im in enumerate(images):
        Image.fromarray(im).save(out / f"image_{i:02d}.png")
    net = K.load()
    with torch.no_grad():
        logits = net(K.to_input(images))
    save_tensors(out / "logits.safetensors", {k: v.float().contiguous() for k, v in logits.items()})
    write_json(out / "labels.json", K.predict(net, images))


if __name__ == "__main__":
    main()
