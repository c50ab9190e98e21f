"""Checks claims of shared/reference/diffusers-spec.md against the pinned libraries and the tiny-flux
fixture (run after make_tiny_flux.py; prints one line per claim; not a fixture script)."""
from __future__ import annotations

import json
import math

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import load_file

from _common import FIXTURES, deterministic


def say(ok: bool, claim: str, detail: str = "") -> None:
    print(f"[{'ok' if ok else 'DIFFERS'}] {claim}" + (f" -- {detail}" if detail else ""))


def main() -> None:
    deterministic(0)
    from diffusers import FlowMatchEulerDiscreteScheduler, FluxPipeline

    ref = FIXTURES / "tiny-flux" / "reference"
    sch = load_file(ref / "scheduler.safetensors")
    params = json.loads((ref / "params.json").read_text())
    # H.1.3 dynamic shifting formula
    worst = 0.0
    for key, p in params["scheduler"].items():
        if not key.startswith("dev."):
            continue
        n, mu = p["num_inference_steps"], p["mu"]
        s = np.linspace(1.0, 1 / n, n)
        want = math.exp(mu) / (math.exp(mu) + (1 / s - 1))
        got = sch[f"{key}.sigmas"].double().numpy()
        worst = max(worst, float(np.abs(got[:-1] - want).max()), abs(got[-1]))
        worst = max(worst, float(np.abs(sch[f"{key}.timesteps"].double().numpy() - want * 1000).max() / 1000))
    say(worst < 1e-6, "H.1.3 sigma' = e^mu/(e^mu+(1/sigma-1)), timesteps = 1000 sigma', terminal 0 "
        "(shift 3.0 unused when use_dynamic_shifting)", f"max abs err {worst:.2e} (float32 storage)")
    sc = load_file(ref / "scheduler.safetensors")
    s = sc["schnell.steps4.seq256.sigmas"].double().numpy()
    say(np.allclose(s, [1, .75, .5, .25, 0], atol=1e-7), "schnell config (shift 1, no dynamic shifting): "
        "sigmas = linspace(1, 1/N, N) + [0]")
    # H.1.2 packing and ids
    lat = torch.arange(1 * 16 * 4 * 6, dtype=torch.float32).reshape(1, 16, 4, 6)
    packed = FluxPipeline._pack_latents(lat, 1, 16, 4, 6)
    ok = True
    for r in range(2):
        for c in range(3):
            for ch in range(16):
                for dy in range(2):
                    for dx in range(2):
                        ok &= packed[0, r * 3 + c, ch * 4 + dy * 2 + dx].item() == lat[0, ch, 2 * r + dy, 2 * c + dx].item()
    say(ok, "H.1.2 pack 2x2: channel c*4+dy*2+dx, patches row-major")
    ids = FluxPipeline._prepare_latent_image_ids(1, 2, 3, "cpu", torch.float32)
    say(ids.tolist() == [[0, r, c] for r in range(2) for c in range(3)], "H.1.2 img_ids[r*(w/2)+c] = (0, r, c)")
    gen = load_file(ref / "generate.safetensors")
    say(list(gen["txt_ids"].shape) == [512, 3] and not gen["txt_ids"].any(),
        "H.1.1 text_ids zeros [max_sequence_length, 3]")
    sgen = load_file(FIXTURES / "tiny-flux-schnell" / "reference" / "generate.safetensors")
    say(list(sgen["txt_ids"].shape) == [256, 3], "text_ids follow max_sequence_length (256 -> [256,3])")
    say(gen["guidance"].dtype == torch.float32, "H.1.4 guidance tensor is float32 (pipeline), cast to the "
        "model dtype and x1000 inside the transformer")
    t0 = gen["step0.timestep"]
    say(abs(t0.item() - sc["dev.steps2.seq64.timesteps"][0].item() / 1000) < 1e-7,
        "H.1.5 transformer gets timestep/1000 (in latents dtype)")
    # H.1.5 Euler step
    x, v, x1 = gen["step0.latents_in"], gen["step0.noise_pred"], gen["step0.latents_out"]
    sg = sc["dev.steps2.seq64.sigmas"]
    say(torch.equal(x1, (x.float() + (sg[1] - sg[0]) * v.float()).to(x.dtype)), "H.1.5 Euler x + (s1-s0) v in fp32")
    # H.1.6 decode
    step_last = gen["step1.latents_out"]
    unpacked = FluxPipeline._unpack_latents(step_last, 32, 32, 2)
    say(torch.allclose(gen["vae_decoder_in"], unpacked / 0.3611 + 0.1159), "H.1.6 z = latents/0.3611 + 0.1159")
    img = gen["image_f32"]
    say(torch.equal(gen["image_u8"], (img * 255).round().to(torch.uint8)), "H.1.6 uint8 = round(x*255)")
    # A.1 safetensors metadata
    metas = {}
    for f in sorted(p for p in (FIXTURES / "tiny-flux").glob("*/*.safetensors") if p.parent.name != "reference"):
        with safe_open(f, "pt") as h:
            metas[f"{f.parent.name}/{f.name}"] = h.metadata()
    say(all(m == {"format": "pt"} for m in metas.values()), "A.1 every saved weight file has metadata "
        "{'format': 'pt'}", json.dumps(metas))
    mi = json.loads((FIXTURES / "tiny-flux" / "model_index.json").read_text())
    say(mi["tokenizer_2"] == ["transformers", "T5TokenizerFast"], "A.2 tokenizer_2 class T5TokenizerFast",
        f"model_index.json written by save_pretrained says {mi['tokenizer_2']}")
    say(mi["image_encoder"] == [None, None], "A.1 missing optional components are [null, null]")


if __name__ == "__main__":
    main()
