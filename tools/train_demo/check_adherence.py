"""Prompt adherence of the demo model, judged by the demo classifier (models/demo-flux-classifier).

Generates the 20 fixed prompts of dataset.adherence_prompts() (fixed seeds) with Diffusers' FluxPipeline from
models/demo-flux and counts a prompt as drawn right when the classifier's colour, shape, count AND position all
match the prompt. Prints per-attribute scores and the total ("N/20"); --json writes them; --grid saves the images.

    nice -n 19 python check_adherence.py [--steps 20] [--dtype float32|bfloat16] [--grid out.png]
"""
from __future__ import annotations

import argparse
import json
import math

import common as C
import dataset as D
import classifier as K


def generate(folder, prompts, steps, dtype, true_cfg=1.0, vae=""):
    import numpy as np
    import torch
    from diffusers import AutoencoderKL, FluxPipeline
    pipe = FluxPipeline.from_pretrained(str(folder), torch_dtype=getattr(torch, dtype))
    if vae:  # another VAE folder (e.g. a fine-tuned decoder) in place of the pipeline's
        pipe.vae = AutoencoderKL.from_pretrained(vae, torch_dtype=getattr(torch, dtype))
    pipe.set_progress_bar_config(disable=True)
    ims = []
    for p, _, seed in prompts:
        g = torch.Generator().manual_seed(seed)
        ims.append(np.asarray(pipe(p, height=C.IMAGE_SIZE, width=C.IMAGE_SIZE, num_inference_steps=steps,
                                   generator=g, max_sequence_length=C.MAX_SEQ, true_cfg_scale=true_cfg,
                                   negative_prompt="" if true_cfg > 1 else None).images[0]))
    return np.stack(ims)


def judge(images, prompts):
    net = K.load()
    pred = K.predict(net, images)
    rows, ok = [], {k: 0 for k in K.HEADS}
    right = 0
    for (p, a, seed), q in zip(prompts, pred):
        want = {"colour": a.colour, "shape": a.shape, "count": str(a.count), "position": a.position}
        hit = {k: q[k] == want[k] for k in K.HEADS}
        for k in K.HEADS:
            ok[k] += hit[k]
        right += all(hit.values())
        rows.append(dict(prompt=p, seed=seed, predicted=q, right=all(hit.values())))
    return right, ok, rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=str(C.MODEL_DIR))
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--true-cfg", type=float, default=1.0, help="true CFG scale with negative prompt \"\" (1 = off)")
    ap.add_argument("--seed-offset", type=int, default=0,
                    help="add this to every seed: other draws of the same prompts, for choosing sampling settings "
                         "(CFG scale, steps) without looking at the fixed check")
    ap.add_argument("--vae", default="", help="an AutoencoderKL folder to use instead of the model's")
    ap.add_argument("--grid", default="")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    C.setup()
    prompts = [(p, a, seed + args.seed_offset) for p, a, seed in D.adherence_prompts()]
    images = generate(args.model, prompts, args.steps, args.dtype, args.true_cfg, args.vae)
    right, ok, rows = judge(images, prompts)
    for r in rows:
        print(("OK   " if r["right"] else "MISS ") + f"{r['prompt']!r} seed {r['seed']} -> {r['predicted']}")
    n = len(prompts)
    print("per attribute:", {k: f"{v}/{n}" for k, v in ok.items()})
    print(f"adherence: {right}/{n} prompts drawn right (steps {args.steps}, {args.dtype}, true CFG {args.true_cfg})")
    # The classifier on the TRUE renders of the same prompts: the judge's own ceiling.
    import numpy as np
    truth = np.stack([np.asarray(D.render(a, np.random.default_rng(s))) for _, a, s in prompts])
    t_right, _, _ = judge(truth, prompts)
    print(f"classifier on the procedural renders of the same prompts: {t_right}/{n}")
    if args.grid:
        from PIL import Image
        s = C.IMAGE_SIZE * 2
        g = Image.new("RGB", (s * 5, s * math.ceil(n / 5)))
        for i, im in enumerate(images):
            g.paste(Image.fromarray(im).resize((s, s), Image.Resampling.NEAREST), ((i % 5) * s, (i // 5) * s))
        g.save(args.grid)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(right=right, total=n, per_attribute=ok, classifier_on_truth=t_right, steps=args.steps,
                           dtype=args.dtype, true_cfg=args.true_cfg, rows=rows), f, indent=2)


if __name__ == "__main__":
    main()
