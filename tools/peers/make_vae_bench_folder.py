#!/usr/bin/env python3
"""A FluxPipeline folder for timing diffq's FLUX.1 VAE decode on the GPU (scripts/device-check.sh, part
diffq_vae): FLUX.1-dev's AutoencoderKL config with random bf16 weights (84 M parameters), in front of
tests/fixtures/tiny-flux's text encoders, tokenizers and scheduler (linked, not copied) and a tiny random
FluxTransformer2DModel of 64 input channels (16 latent channels x 2 x 2), so that
`diffq generate -m DIR --width 1024 --height 1024 --steps 1 --json` spends its time in the decode and reports
it (timings.decode_s). The peer decodes the same config (tools/peers/diffusers_device_peer.py, vae_decode).

  make_vae_bench_folder.py DIR        (needs torch and diffusers; runs on the CPU, ~10 s)
"""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "tests" / "fixtures" / "tiny-flux"
sys.path.insert(0, str(Path(__file__).resolve().parent))
from diffusers_device_peer import FLUX_VAE  # noqa: E402  one config for both engines


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    out = Path(sys.argv[1])
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    import torch
    from diffusers import AutoencoderKL, FluxTransformer2DModel

    torch.manual_seed(0)
    for name in ("scheduler", "text_encoder", "text_encoder_2", "tokenizer", "tokenizer_2"):
        os.symlink(TINY / name, out / name)
    shutil.copy(TINY / "model_index.json", out / "model_index.json")
    tiny = FluxTransformer2DModel.load_config(TINY / "transformer")
    tiny = {k: v for k, v in tiny.items() if not k.startswith("_")}
    tiny.update(in_channels=64, out_channels=None)  # the tiny transformer, over FLUX.1's 16 latent channels
    FluxTransformer2DModel(**tiny).save_pretrained(out / "transformer")
    vae = AutoencoderKL(**FLUX_VAE).to(torch.bfloat16)
    vae.save_pretrained(out / "vae")
    print(f"wrote {out}: FLUX.1 VAE ({sum(p.numel() for p in vae.parameters()) / 1e6:.1f} M parameters, bf16) "
          f"behind tiny-flux's encoders")
    return 0


if __name__ == "__main__":
    sys.exit(main())
