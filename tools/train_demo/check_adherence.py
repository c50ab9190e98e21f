"""Prompt adherence of the demo model, judged by the demo classifier (models/demo-flux-classifier).

Generates the 20 fixed prompts of dataset.adherence_prompts() (fixed seeds) with Diffusers' FluxPipeline from
models/demo-flux and counts a prompt as drawn right when the classifier's colour, shape, count AND position all
match the prompt. Prints per-attribute scores and the total ("N/20"); --json writes them; --grid saves the images.

    nice -n 19 python check_adherence.py [--steps 20] [--dtype float32|bfloat16] [--grid out.png]
    python check_adherence.py --device cuda --true-cfg 4 --seed-offsets 0 1000 --judge DIR --json a.json --grid a.png
"""
from __future__ import annotations

import argparse
import json
import math

import common as C
import dataset as D
import classifier as K


def generate(folder, prompts, steps, dtype, true_cfg=1.0, vae="", device="cpu", batch=1):
    """One image per (prompt, attributes, seed), uint8 [N, 64, 64, 3]. The noise comes from torch.Generator()
    (the CPU's) seeded per prompt, as diffq draws it, also when the pipeline runs on the GPU; batch > 1 draws that
    many prompts per pipeline call (each with its own generator: the same noise as one at a time)."""
    import numpy as np
    import torch
    from diffusers import AutoencoderKL, FluxPipeline
    pipe = FluxPipeline.from_pretrained(str(folder), torch_dtype=getattr(torch, dtype))
    if vae:  # another VAE folder (e.g. a fine-tuned decoder) in place of the pipeline's
        pipe.vae = AutoencoderKL.from_pretrained(vae, torch_dtype=getattr(torch, dtype))
    pipe = pipe.to(device)
    pipe.set_progress_bar_config(disable=True)
    ims = []
    for i in range(0, len(prompts), batch):
        chunk = prompts[i:i + batch]
        gens = [torch.Generator().manual_seed(seed) for _, _, seed in chunk]
        kw = dict(height=C.IMAGE_SIZE, width=C.IMAGE_SIZE, num_inference_steps=steps, max_sequence_length=C.MAX_SEQ,
                  true_cfg_scale=true_cfg, output_type="np")
        if batch == 1:  # today's call
            kw.update(prompt=chunk[0][0], generator=gens[0], negative_prompt="" if true_cfg > 1 else None)
        else:
            kw.update(prompt=[p for p, _, _ in chunk], generator=gens,
                      negative_prompt=[""] * len(chunk) if true_cfg > 1 else None)
        with torch.no_grad():
            out = pipe(**kw).images  # float [b, H, W, 3] in [0, 1]
        ims += list(pipe.image_processor.numpy_to_pil(out))
    return np.stack([np.asarray(im) for im in ims])


def judge(images, prompts, folder=None):
    net = K.load(folder)
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
    ap.add_argument("--judge", default=str(C.CLASSIFIER_DIR), help="the classifier folder (classifier.py --out)")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--true-cfg", type=float, default=1.0, help="true CFG scale with negative prompt \"\" (1 = off)")
    ap.add_argument("--seed-offset", type=int, default=0,
                    help="add this to every seed: other draws of the same prompts, for choosing sampling settings "
                         "(CFG scale, steps) without looking at the fixed check")
    ap.add_argument("--seed-offsets", type=int, nargs="+", default=None, metavar="OFFSET",
                    help="several seed offsets in one run (e.g. 0 1000); --json then holds one entry per offset")
    ap.add_argument("--vae", default="", help="an AutoencoderKL folder to use instead of the model's")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                    help="where Diffusers runs (the judge runs on the CPU); the noise is the CPU generator's either way")
    ap.add_argument("--batch", type=int, default=0, help="prompts per pipeline call (default: 1 on the CPU, 20 on cuda)")
    ap.add_argument("--grid", default="")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    C.setup(device=args.device)
    import numpy as np
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False  # float32 as on the CPU (setup allows TF32 for training)
    torch.backends.cudnn.allow_tf32 = False
    offsets = args.seed_offsets if args.seed_offsets is not None else [args.seed_offset]
    batch = args.batch or (20 if args.device == "cuda" else 1)
    n = len(D.adherence_prompts())
    results, blocks = {}, []
    # The classifier on the TRUE renders of the same prompts: the judge's own ceiling.
    truth_prompts = [(p, a, seed + offsets[0]) for p, a, seed in D.adherence_prompts()]
    truth = np.stack([np.asarray(D.render(a, np.random.default_rng(s))) for _, a, s in truth_prompts])
    t_right, t_ok, t_rows = judge(truth, truth_prompts, args.judge)
    truth_by_offset = {}
    for off in offsets:
        prompts = [(p, a, seed + off) for p, a, seed in D.adherence_prompts()]
        truth_by_offset[str(off)] = judge(np.stack([np.asarray(D.render(a, np.random.default_rng(s)))
                                                    for _, a, s in prompts]), prompts, args.judge)[0]
        images = generate(args.model, prompts, args.steps, args.dtype, args.true_cfg, args.vae, args.device, batch)
        right, ok, rows = judge(images, prompts, args.judge)
        if len(offsets) > 1:
            print(f"-- seeds + {off}")
        for r in rows:
            print(("OK   " if r["right"] else "MISS ") + f"{r['prompt']!r} seed {r['seed']} -> {r['predicted']}")
        print("per attribute:", {k: f"{v}/{n}" for k, v in ok.items()})
        print(f"adherence: {right}/{n} prompts drawn right (steps {args.steps}, {args.dtype}, true CFG {args.true_cfg}"
              f"{f', seeds + {off}' if off else ''})")
        results[off] = dict(right=right, total=n, per_attribute=ok, classifier_on_truth=t_right, steps=args.steps,
                            dtype=args.dtype, true_cfg=args.true_cfg, seed_offset=off, rows=rows)
        blocks.append(images)
    print(f"classifier on the procedural renders of the same prompts: {t_right}/{n}"
          + (f" (per seed offset: {truth_by_offset})" if len(offsets) > 1 else ""))
    if args.grid:  # 5 prompts a row, 4 rows a block; blocks: one per seed offset, then the true drawings
        from PIL import Image
        s = C.IMAGE_SIZE * 2
        blocks.append(truth)
        rows_per = math.ceil(n / 5)
        g = Image.new("RGB", (s * 5, s * rows_per * len(blocks) + 8 * (len(blocks) - 1)), (255, 0, 255))
        for b, ims in enumerate(blocks):
            for i, im in enumerate(ims):
                g.paste(Image.fromarray(im).resize((s, s), Image.Resampling.NEAREST),
                        ((i % 5) * s, (b * rows_per + i // 5) * s + 8 * b))
        g.save(args.grid)
    if args.json:
        with open(args.json, "w") as f:
            if args.seed_offsets is None:  # today's file
                json.dump(results[offsets[0]], f, indent=2)
            else:
                json.dump(dict(runs={str(o): {k: v for k, v in r.items() if k != "classifier_on_truth"}
                                     for o, r in results.items()},
                               summary={str(o): f"{r['right']}/{n} (colour {r['per_attribute']['colour']}, shape "
                                                f"{r['per_attribute']['shape']}, count {r['per_attribute']['count']}, "
                                                f"position {r['per_attribute']['position']})"
                                        for o, r in results.items()},
                               classifier_on_truth=dict(right=t_right, total=n, per_attribute=t_ok, seed_offset=offsets[0],
                                                        misses=[r for r in t_rows if not r["right"]],
                                                        right_by_seed_offset=truth_by_offset),
                               model=str(args.model), judge=str(args.judge), device=args.device, batch=batch), f,
                          indent=2)


if __name__ == "__main__":
    main()
