"""How much the transformer uses each caption word: its flow loss on 192 held-out images at fixed t and noise,
with the true caption, the shape word swapped (next shape), the colour word swapped, and no caption.

    python probe_shape_word.py [--model models/demo-flux]
"""
from __future__ import annotations

import argparse

import common as C
import dataset as D


def swapped(caption, a, kind):
    if kind == "empty":
        return ""
    words = caption.split()
    if kind == "shape":
        other = D.SHAPES[(D.SHAPES.index(a.shape) + 1) % len(D.SHAPES)]
        return " ".join(other + w[len(a.shape):] if w in (a.shape, a.shape + "s") else w for w in words)
    other = next(c for c in D.COLOUR_NAMES if c not in (a.colour, a.background))
    return " ".join(other if w == a.colour else w for w in words)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=str(C.MODEL_DIR))
    args = ap.parse_args()
    C.setup()
    import torch
    from diffusers import FluxPipeline
    pipe = FluxPipeline.from_pretrained(args.model, torch_dtype=torch.float32)
    vae, tr = pipe.vae, pipe.transformer
    images, caps, attrs = D.make_arrays(192, seed=C.SEED + 1)
    x = torch.from_numpy(images).permute(0, 3, 1, 2).float().div(127.5).sub(1.0)
    with torch.no_grad():
        z = C.pack((vae.encode(x).latent_dist.mean - vae.config.shift_factor) * vae.config.scaling_factor)
        text = {}
        for kind in ("true", "shape", "colour", "empty"):
            cs = caps if kind == "true" else [swapped(c, a, kind) for c, a in zip(caps, attrs)]
            seq, pooled, _ = pipe.encode_prompt(cs, cs, max_sequence_length=C.MAX_SEQ)
            text[kind] = (seq, pooled)
        eps = torch.randn(z.shape, generator=torch.Generator().manual_seed(5))
        ids, txt_ids = C.image_ids(8, 8), torch.zeros(C.MAX_SEQ, 3)
        for t in (0.2, 0.4, 0.6, 0.8, 0.95):
            xt = (1 - t) * z + t * eps
            row = []
            for kind, (seq, pooled) in text.items():
                pred = tr(hidden_states=xt, timestep=torch.full((len(z),), t), pooled_projections=pooled,
                          encoder_hidden_states=seq, txt_ids=txt_ids, img_ids=ids, guidance=None, return_dict=False)[0]
                row.append(f"{kind} {(pred - (eps - z)).pow(2).mean().item():.4f}")
            print(f"t {t}: " + "  ".join(row), flush=True)


if __name__ == "__main__":
    main()
