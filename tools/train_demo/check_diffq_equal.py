"""diffq and Diffusers draw the same image from the shipped demo folder (issue 22: PSNR >= 40 dB).

For each prompt: `diffq generate -m models/demo-flux -p PROMPT --seed S` (no other flag: float32 compute and the
folder's generation_defaults.json) writes a PNG; Diffusers' FluxPipeline (torch_dtype float32, the same seed through
torch.Generator('cpu').manual_seed) draws the same prompt with generation_defaults.json's arguments passed to
__call__ (Diffusers does not read that file); the two uint8 images are compared (PSNR over RGB, peak 255). Exit
status 1 when any PSNR is below --min-psnr.

    nice -n 19 python check_diffq_equal.py [--diffq build/bin/diffq] [--steps 20]
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import common as C

PROMPTS = [("a red circle", 1), ("two blue squares on the left on a white background", 2),
           ("three yellow stars at the bottom on a black background", 3), ("a large green ring in the center", 4),
           ("two purple triangles at the top on a gray background", 5), ("a photo of a cat", 6)]


def psnr(a, b) -> float:
    import numpy as np
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return float("inf") if mse == 0 else 10 * np.log10(255.0 ** 2 / mse)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--diffq", default=str(C.ROOT / "build" / "bin" / "diffq"))
    ap.add_argument("--model", default=str(C.MODEL_DIR))
    ap.add_argument("--threads", type=int, default=C.NUM_THREADS)
    ap.add_argument("--min-psnr", type=float, default=40.0)
    ap.add_argument("--seed-offset", type=int, default=0, help="diffq seed = seed + offset (a perturbation check)")
    ap.add_argument("--save", default="", help="folder to keep both images in")
    args = ap.parse_args()
    C.setup()
    import numpy as np
    import torch
    from diffusers import FluxPipeline
    from PIL import Image

    import json
    call = {k: v for k, v in json.loads((Path(args.model) / "generation_defaults.json").read_text()).items()
            if not k.startswith("_")}
    print("Diffusers call arguments (generation_defaults.json):", call)
    pipe = FluxPipeline.from_pretrained(args.model, torch_dtype=torch.float32)
    pipe.set_progress_bar_config(disable=True)
    worst = float("inf")
    with tempfile.TemporaryDirectory() as tmp:
        for prompt, seed in PROMPTS:
            out = Path(tmp) / f"diffq_{seed}.png"
            cmd = [args.diffq, "generate", "-m", args.model, "-p", prompt, "--seed", str(seed + args.seed_offset),
                   "--threads", str(args.threads), "-o", str(out)]
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
            ours = np.asarray(Image.open(out).convert("RGB"))
            ref = np.asarray(pipe(prompt, generator=torch.Generator().manual_seed(seed), **call).images[0])
            p = psnr(ours, ref)
            worst = min(worst, p)
            print(f"{prompt!r} seed {seed}: PSNR {p:.2f} dB, max |diff| {int(np.abs(ours.astype(int) - ref).max())}"
                  f" (Diffusers image: mean {ref.mean():.1f}, std {ref.std():.1f})")
            if args.save:
                Image.fromarray(ours).save(Path(args.save) / f"diffq_{seed}.png")
                Image.fromarray(ref).save(Path(args.save) / f"diffusers_{seed}.png")
    print(f"worst PSNR {worst:.2f} dB (required >= {args.min_psnr})")
    sys.exit(0 if worst >= args.min_psnr else 1)


if __name__ == "__main__":
    main()
