#!/usr/bin/env python3
"""A FluxPipeline folder with a bf16 transformer of FLUX.1's width, for measuring memory and speed on a
memory-mapped checkpoint (docs/benchmarks.md "Linear weights packed once"): FluxTransformer2DModel with
24 heads x 128 (width 3072), 1 double and 2 single blocks (672 M parameters, 1.3 GB), random N(0, 0.02)
weights saved in bfloat16 with save_pretrained, in front of tests/fixtures/tiny-flux's text encoders,
tokenizers, scheduler and VAE (copied).

  tools/.venv/bin/python tools/bench/make_flux_width_folder.py DIR     (needs torch and diffusers; ~30 s)
"""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import torch
from diffusers import FluxTransformer2DModel

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "tests" / "fixtures" / "tiny-flux"


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    dst = Path(sys.argv[1])
    if dst.exists():
        print(f"make_flux_width_folder: {dst} exists", file=sys.stderr)
        return 2
    shutil.copytree(TINY, dst, ignore=shutil.ignore_patterns("reference", "transformer"))
    cfg = json.loads((TINY / "transformer" / "config.json").read_text())
    torch.manual_seed(0)
    m = FluxTransformer2DModel(patch_size=1, in_channels=cfg["in_channels"], num_layers=1, num_single_layers=2,
                               attention_head_dim=128, num_attention_heads=24,
                               joint_attention_dim=cfg["joint_attention_dim"],
                               pooled_projection_dim=cfg["pooled_projection_dim"],
                               guidance_embeds=cfg["guidance_embeds"], axes_dims_rope=[16, 56, 56])
    with torch.no_grad():
        for p in m.parameters():
            p.normal_(0.0, 0.02)
    m.to(torch.bfloat16).save_pretrained(dst / "transformer")
    print(f"{dst}: {sum(p.numel() for p in m.parameters()) / 1e6:.1f} M transformer parameters")
    return 0


if __name__ == "__main__":
    sys.exit(main())
