"""Step 3: a FluxTransformer2DModel of a few million parameters (guidance_embeds False) trained with the
rectified-flow objective that FlowMatchEulerDiscreteScheduler integrates, then the whole pipeline saved with
FluxPipeline.save_pretrained to models/demo-flux/.

Objective: x_t = (1 - t) x0 + t eps, the model predicts eps - x0 (MSE). t = FLUX's time shift of a logit-normal
draw, exp(mu) / (exp(mu) + 1/u - 1) with u = sigmoid(N(0, 1)) and mu = calculate_shift(image tokens), the
shift the pipeline applies to its sigmas at inference (`--t-sampling uniform`: u ~ U(0, 1) instead, more
high-noise steps). Captions are dropped (-> "") with probability 0.1.
Text embeddings come from the frozen text encoders exactly as FluxPipeline computes them (T5 padded to
MAX_SEQ tokens, CLIP pooled output at 77). The saved transformer is an EMA of the weights.

    nice -n 19 python train_flux.py [--steps 3000] [--n 20000]
    python train_flux.py --device cuda --time-budget 280 --batch 512 --n 240000 --train-text ...  (device_train.sh)

--device cuda: bf16 autocast, the latents, caption ids and labels held on the GPU, every random draw made there,
losses read back every 250 steps only (no host sync per step), fused AdamW, EMA by one foreach lerp.
"""
from __future__ import annotations

import argparse
import copy
import json
import math
import shutil

import common as C
import dataset as D


def encode_text(captions, tok, clip, tok2, t5, device="cpu"):
    import torch
    with torch.no_grad():
        ids = tok(captions, padding="max_length", max_length=77, truncation=True, return_tensors="pt").input_ids
        pooled = clip(ids.to(device), output_hidden_states=False).pooler_output
        ids2 = tok2(captions, padding="max_length", max_length=C.MAX_SEQ, truncation=True,
                    return_tensors="pt").input_ids
        seq = t5(ids2.to(device), output_hidden_states=False)[0]
    return pooled, seq


def load_text():
    from transformers import CLIPTextModel, CLIPTokenizer, T5EncoderModel, T5TokenizerFast
    t = C.WORK / "text"
    return (CLIPTokenizer.from_pretrained(str(t / "tokenizer"), model_max_length=77), CLIPTextModel.from_pretrained(str(t / "text_encoder")).eval(),
            T5TokenizerFast.from_pretrained(str(t / "tokenizer_2")),
            T5EncoderModel.from_pretrained(str(t / "text_encoder_2")).eval())


KEEP = ("README.md", "generation_defaults.json")  # files of models/demo-flux that training leaves as they are


def save_pipeline(transformer, vae, text, dtype, out):
    import torch
    from diffusers import FlowMatchEulerDiscreteScheduler, FluxPipeline
    tok, clip, tok2, t5 = text
    def host(m):  # a bf16 (or float32) copy on the CPU
        return copy.deepcopy(m).to(device="cpu", dtype=dtype)
    pipe = FluxPipeline(scheduler=FlowMatchEulerDiscreteScheduler(**C.SCHED_CFG), vae=host(vae),
                        text_encoder=host(clip), tokenizer=tok, text_encoder_2=host(t5), tokenizer_2=tok2,
                        transformer=host(transformer))
    keep = {n: (out / n).read_bytes() for n in KEEP if (out / n).is_file()}  # written by hand, not by Diffusers
    final, out = out, out.with_name(out.name + ".saving")  # written beside, then swapped in (a kill mid-save
    if out.exists():                                          # leaves the previous checkpoint whole)
        shutil.rmtree(out)
    pipe.save_pretrained(str(out), safe_serialization=True)
    for n, b in keep.items():
        (out / n).write_bytes(b)
    for cfg in out.glob("*/config.json"):  # no path of the training machine in the shipped configs
        d = json.loads(cfg.read_text())
        if d.pop("_name_or_path", None) is not None:
            cfg.write_text(json.dumps(d, indent=2, sort_keys=True) + "\n")
    # The Hub layout of FLUX checkpoints: CLIP as vocab.json + merges.txt, T5 with spiece.model + tokenizer.json.
    src = C.WORK / "text"
    (out / "tokenizer" / "tokenizer.json").unlink(missing_ok=True)
    for f in ("vocab.json", "merges.txt"):
        shutil.copy(src / "tokenizer" / f, out / "tokenizer" / f)
    shutil.copy(src / "tokenizer_2" / "spiece.model", out / "tokenizer_2" / "spiece.model")
    if final.exists():
        shutil.rmtree(final)
    out.rename(final)
    del torch


def grow(model, extra_double, extra_single):
    """The transformer with `extra_double` double-stream and `extra_single` single-stream blocks appended, each
    starting as the identity (adaLN-Zero: its modulation linears are zero, so every gate is 0 and the residual stream
    passes unchanged), so the grown model computes what `model` did and training adds capacity from there."""
    import torch
    from diffusers import FluxTransformer2DModel
    cfg = {k: model.config[k] for k in C.FLUX_CFG}
    n_double, n_single = cfg["num_layers"], cfg["num_single_layers"]
    cfg.update(num_layers=n_double + extra_double, num_single_layers=n_single + extra_single)
    new = FluxTransformer2DModel(**cfg)  # new blocks: the default init, then their modulation zeroed
    missing, unexpected = new.load_state_dict(model.state_dict(), strict=False)
    assert not unexpected, unexpected
    assert all(k.startswith(("transformer_blocks.", "single_transformer_blocks.")) for k in missing), missing
    with torch.no_grad():
        for blk in new.transformer_blocks[n_double:]:
            for lin in (blk.norm1.linear, blk.norm1_context.linear):
                lin.weight.zero_()
                lin.bias.zero_()
        for blk in new.single_transformer_blocks[n_single:]:
            blk.norm.linear.weight.zero_()
            blk.norm.linear.bias.zero_()
    return new


def widen(model, heads):
    """The transformer with `heads` attention heads (twice the trained model's), computing what `model` did
    (Net2Net): every doubled dimension holds each old unit twice (new unit i is old unit (i // 2W) * W + i % W,
    W the old width; so heads h and h + H share old head h's weights, and the 6/3/2 modulation chunks and the MLP's
    hidden units are doubled chunk by chunk). A layer reading doubled units splits each old weight between the two
    copies as a and 1 - a (a drawn in [0.3, 0.7] per weight): the sum, hence the output, is unchanged, and as the
    copies' outgoing weights differ, their gradients differ and training makes them diverge. LayerNorm over
    [x, x] equals [LayerNorm(x)] twice, and head_dim stays 32, so attention scale and RoPE are unchanged."""
    import torch
    from diffusers import FluxTransformer2DModel
    cfg = {k: model.config[k] for k in C.FLUX_CFG}
    w = cfg["num_attention_heads"] * cfg["attention_head_dim"]
    if heads != 2 * cfg["num_attention_heads"]:
        raise SystemExit(f"--widen doubles the heads: {cfg['num_attention_heads']} -> "
                         f"{2 * cfg['num_attention_heads']}, got {heads}")
    cfg.update(num_attention_heads=heads)
    new = FluxTransformer2DModel(**cfg)
    g = torch.Generator().manual_seed(C.SEED + 24)

    def src(n):  # old unit of each of n new units
        i = torch.arange(n)
        return (i // (2 * w)) * w + i % w

    target = new.state_dict()
    sd = {}
    for k, t in model.state_dict().items():
        shp = target[k].shape
        for d in range(t.ndim):
            if shp[d] == t.shape[d]:
                continue
            assert shp[d] == 2 * t.shape[d] and t.shape[d] % w == 0, (k, tuple(t.shape), tuple(shp))
            t = t.index_select(d, src(shp[d]))
            if d == 1:  # reads doubled units: split each weight between its two copies
                a = 0.3 + 0.4 * torch.rand((shp[0], shp[1] // (2 * w), 1, w), generator=g)
                t = (t.view(shp[0], -1, 2, w) * torch.cat([a, 1 - a], 2)).view(shp)
        sd[k] = t.contiguous()
    new.load_state_dict(sd, strict=True)
    return new


def sample_grid(folder, path, prompts, steps=20):
    import torch
    from diffusers import FluxPipeline
    from PIL import Image
    pipe = FluxPipeline.from_pretrained(str(folder), torch_dtype=torch.float32)
    pipe.set_progress_bar_config(disable=True)
    ims = []
    for i, p in enumerate(prompts):
        g = torch.Generator().manual_seed(i)
        ims.append(pipe(p, height=C.IMAGE_SIZE, width=C.IMAGE_SIZE, num_inference_steps=steps, generator=g,
                        max_sequence_length=C.MAX_SEQ).images[0])
    s = C.IMAGE_SIZE * 2
    grid = Image.new("RGB", (s * 4, s * math.ceil(len(ims) / 4)))
    for i, im in enumerate(ims):
        grid.paste(im.resize((s, s), Image.Resampling.NEAREST), ((i % 4) * s, (i // 4) * s))
    grid.save(path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--n", type=int, default=20000, help="training images")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--drop", type=float, default=0.1, help="caption dropout")
    ap.add_argument("--ema", type=float, default=0.999)
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    ap.add_argument("--out", default=str(C.MODEL_DIR))
    ap.add_argument("--train-text", action="store_true",
                    help="train the CLIP and T5 encoders with the transformer (they start from build_text.py's random "
                         "ones); without it they stay frozen")
    ap.add_argument("--layers", type=int, nargs=2, default=None, metavar=("DOUBLE", "SINGLE"),
                    help="transformer blocks (default: common.FLUX_CFG's)")
    ap.add_argument("--heads", type=int, default=None, help="attention heads of 32 dims (default: common.FLUX_CFG's)")
    ap.add_argument("--t-sampling", default="logit-normal", choices=["logit-normal", "uniform"],
                    help="the draw u of the noise level before FLUX's time shift: sigmoid(N(0, 1)) (SD3/FLUX's choice, "
                         "few samples near t = 1) or U(0, 1) (more weight on the high-noise steps, where the "
                         "background and layout are decided)")
    ap.add_argument("--init", default="",
                    help="continue from a saved pipeline folder: its transformer (config and weights, as float32) and its "
                         "text encoders (trained further with --train-text, else frozen); --layers/--heads are ignored")
    ap.add_argument("--vae", default="",
                    help="the AutoencoderKL folder whose encoder makes the training latents and which is saved with the "
                         "pipeline (default: $DEMO_WORK/vae, train_vae.py's)")
    ap.add_argument("--grow", type=int, nargs=2, default=None, metavar=("DOUBLE", "SINGLE"),
                    help="with --init: append this many double- and single-stream blocks that start as the identity "
                         "(train_flux.grow), then train the deeper model")
    ap.add_argument("--widen", type=int, default=None, metavar="HEADS",
                    help="with --init: continue with twice the heads (and width), starting from the trained "
                         "model's function (Net2Net, see widen())")
    ap.add_argument("--aux-attributes", type=float, default=0.0, metavar="W",
                    help="with --train-text: add W x the cross-entropy of small linear heads that read each caption's "
                         "attributes (dataset.caption_labels: shape, colour, count, position, size, background) back "
                         "from the CLIP pooled output and from every T5 token, so that the text embeddings carry "
                         "every attribute the caption states (the heads are used in training only, not saved)")
    ap.add_argument("--shape-groups", action="store_true",
                    help="train on dataset.make_shape_groups: every layout drawn with each of the 5 shapes, a batch made "
                         "of whole groups sharing their noise and t (--batch a multiple of 5), so what only the shape "
                         "word changes is seen side by side")
    ap.add_argument("--shape-contrast", type=float, default=0.0, metavar="L",
                    help="with --shape-groups: subtract L x the squared distance of each prediction from the target "
                         "of the same layout with the next shape (pushes the shapes' predictions apart)")
    ap.add_argument("--checkpoint-every", type=float, default=0.0, metavar="S",
                    help="also save the pipeline (EMA weights) to --out every S seconds of training (0: only at the end)")
    ap.add_argument("--no-samples", action="store_true", help="skip the 8-prompt sample grid after saving")
    ap.add_argument("--heldout", type=int, default=256, help="held-out images for the final loss (fixed draws)")
    C.add_device_args(ap)
    args = ap.parse_args()
    if args.shape_groups and args.batch % len(D.SHAPES):
        ap.error(f"--shape-groups needs --batch a multiple of {len(D.SHAPES)}, got {args.batch}")
    if args.shape_contrast and not args.shape_groups:
        ap.error("--shape-contrast compares the shapes of a group: give --shape-groups too")
    if args.grow and not args.init:
        ap.error("--grow deepens a trained transformer: give --init too")
    if args.widen and not args.init:
        ap.error("--widen widens a trained transformer: give --init too")
    if args.aux_attributes and not args.train_text:
        ap.error("--aux-attributes trains the text encoders: give --train-text too")
    dev = C.setup(device=args.device)
    import numpy as np
    import torch
    from diffusers import AutoencoderKL, FluxTransformer2DModel
    from pathlib import Path

    cuda = C.device_path(dev)  # the GPU code path (also on the CPU under DEMO_CPU_AS_DEVICE=1)
    clock = C.Clock()
    text = load_text()
    if args.init:  # the text encoders trained with the transformer being continued
        from transformers import CLIPTextModel, T5EncoderModel
        text = (text[0], CLIPTextModel.from_pretrained(args.init, subfolder="text_encoder", torch_dtype=torch.float32).eval(),
                text[2], T5EncoderModel.from_pretrained(args.init, subfolder="text_encoder_2",
                                                        torch_dtype=torch.float32).eval())
    text = (text[0], text[1].to(dev), text[2], text[3].to(dev))
    tok, clip, tok2, t5 = text
    vae = AutoencoderKL.from_pretrained(args.vae or str(C.WORK / "vae"), torch_dtype=torch.float32).eval().to(dev)
    sf, sh = vae.config.scaling_factor, vae.config.shift_factor

    if args.shape_groups:
        images, caps, _ = D.make_shape_groups(args.n // len(D.SHAPES), seed=C.SEED)
        args.n = len(caps)
    else:
        images, caps, _ = C.data(args.n, C.SEED, args.data_cache)
    print(f"data: {args.n} images rendered/loaded in {clock():.0f}s", flush=True)
    uniq = sorted(set(caps) | {""})
    pooled_u, seq_u = [], []
    for i in range(0, len(uniq), 1024 if cuda else 256):
        with C.autocast(dev):
            p, s = encode_text(uniq[i:i + (1024 if cuda else 256)], tok, clip, tok2, t5, dev)
        pooled_u.append(p.float())
        seq_u.append(s.float())
    pooled_u, seq_u = torch.cat(pooled_u), torch.cat(seq_u)
    where = {c: i for i, c in enumerate(uniq)}  # (built once: per caption it cost O(captions) each)
    cap_idx = torch.tensor([where[c] for c in caps])
    cap_idx = cap_idx.to(dev)
    empty = uniq.index("")
    if args.train_text:  # ids of every caption, encoded per batch with gradients
        ids_u = tok(uniq, padding="max_length", max_length=77, truncation=True, return_tensors="pt").input_ids.to(dev)
        ids2_u = tok2(uniq, padding="max_length", max_length=C.MAX_SEQ, truncation=True,
                      return_tensors="pt").input_ids.to(dev)
    labels_u = torch.tensor([[D.caption_labels(c)[k] for k in D.LABELS] for c in uniq]).to(dev)  # [captions, attributes]
    with torch.no_grad():
        if cuda:  # uint8 to the GPU once, encoded in big batches under bf16 autocast, latents kept in float32
            zs = []
            for i in range(0, args.n, 4096):
                xb = torch.from_numpy(images[i:i + 4096]).to(dev).permute(0, 3, 1, 2).float().div(127.5).sub(1.0)
                with C.autocast(dev):
                    zs.append(vae.encode(xb).latent_dist.mean.float())
            z = torch.cat(zs)
            del zs, xb
        else:
            x = torch.from_numpy(images).permute(0, 3, 1, 2).float().div(127.5).sub(1.0)
            z = torch.cat([vae.encode(x[i:i + 256]).latent_dist.mean for i in range(0, args.n, 256)])
            del x
    del images
    z = C.pack((z - sh) * sf)  # [N, tokens, 4 x latent channels]
    n_tok = z.shape[1]
    h2 = int(round(math.sqrt(n_tok)))
    img_ids = C.image_ids(h2, h2).to(dev)
    txt_ids = torch.zeros(C.MAX_SEQ, 3, device=dev)
    mu = C.mu_for(n_tok)
    print(f"data: {args.n} images, {len(uniq)} captions, latents {tuple(z.shape)} std {z.std():.3f}, "
          f"mu {mu:.3f}, {clock():.0f}s", flush=True)

    torch.manual_seed(C.SEED + 20)
    cfg = dict(C.FLUX_CFG)
    if args.layers:
        cfg.update(num_layers=args.layers[0], num_single_layers=args.layers[1])
    if args.heads:
        cfg.update(num_attention_heads=args.heads)
    cfg.update(in_channels=z.shape[2])  # 4 x the VAE's latent channels
    if args.init:
        model = FluxTransformer2DModel.from_pretrained(args.init, subfolder="transformer", torch_dtype=torch.float32)
        model = model.to(dev)
        changes = []
        if args.grow:
            changes.append((f"grown by {args.grow[0]} double + {args.grow[1]} single blocks",
                            lambda m: grow(m, *args.grow)))
        if args.widen:
            changes.append((f"widened to {args.widen} heads", lambda m: widen(m, args.widen)))
        for how, change in changes:
            old, model = model, change(model.cpu()).to(dev)
            old = old.to(dev)
            with torch.no_grad():  # the changed model computes what the old one did (same inputs, same output)
                k = torch.arange(4, device=dev)
                inp = dict(hidden_states=z[k], timestep=torch.full((4,), 0.5, device=dev), pooled_projections=pooled_u[k],
                           encoder_hidden_states=seq_u[k], txt_ids=txt_ids, img_ids=img_ids, guidance=None,
                           return_dict=False)
                diff = (old(**inp)[0] - model(**inp)[0]).abs().max().item()
            print(f"{how}: output change {diff:.2e}", flush=True)
            assert diff < 1e-4, diff
            del old
        cfg = {k: model.config[k] for k in cfg}
    else:
        model = FluxTransformer2DModel(**cfg).to(dev)
    n_params = sum(p.numel() for p in model.parameters())
    print("transformer parameters:", n_params, cfg, flush=True)
    # What trains (and what the EMA follows): the transformer, and with --train-text the two text encoders.
    trained = torch.nn.ModuleList([model] + ([clip, t5] if args.train_text else []))
    if args.aux_attributes:  # trained.[3]: per attribute a head on CLIP's pooled output and one on T5's tokens
        torch.manual_seed(C.SEED + 23)
        width = {"clip": clip.config.hidden_size, "t5": t5.config.d_model}
        trained.append(torch.nn.ModuleDict({f"{enc}_{k}": torch.nn.Linear(width[enc], len(v)) for enc in width
                                            for k, v in D.LABELS.items()}).to(dev))
    if args.train_text:
        trained.requires_grad_(True)
    ema_all = copy.deepcopy(trained).eval().requires_grad_(False)
    ema = ema_all[0]
    groups = [{"params": [p for m in trained[:3] for p in m.parameters()]}]
    if args.aux_attributes:  # the new heads start from scratch: 10x the learning rate
        groups.append({"params": list(trained[3].parameters()), "lr": 10 * args.lr})
    opt = torch.optim.AdamW(groups, lr=args.lr, weight_decay=0.01, betas=(0.9, 0.99),
                            **({"fused": True} if cuda else {}))
    budget = C.Budget(args.time_budget, args.steps)
    if args.time_budget:  # warm-up over the first steps, then a cosine over the elapsed fraction of the budget
        warm = 200
        sched = torch.optim.lr_scheduler.LambdaLR(
            opt, lambda s: min(1.0, (s + 1) / warm) * (0.02 + 0.98 * 0.5 * (1 + math.cos(math.pi * budget.progress(s)))))
    else:
        warm = min(200, args.steps // 10 + 1)
        sched = torch.optim.lr_scheduler.LambdaLR(
            opt, lambda s: min(1.0, (s + 1) / warm) * 0.5 * (1 + math.cos(math.pi * min(1.0, s / args.steps))))
    gen = torch.Generator(device=dev).manual_seed(C.SEED + 21)
    params_trained, params_ema = list(trained.parameters()), list(ema_all.parameters())
    hist, aux_hist = [], []  # per step: floats on the CPU, 0-d tensors on the GPU (read back when logged)

    def recent(h):
        return float(torch.stack(h[-100:]).mean()) if cuda else float(np.mean(h[-100:]))
    log_every = 250 if dev.type == "cuda" else 25
    next_ckpt = args.checkpoint_every
    out = Path(args.out)
    budget.start()
    step = 0
    while not budget.stop(step):
        grp = len(D.SHAPES) if args.shape_groups else 1  # grp samples share a layout, a noise and a t
        idx = torch.randint(0, args.n // grp, (args.batch // grp,), generator=gen, device=dev)
        idx = (idx[:, None] * grp + torch.arange(grp, device=dev)).flatten()
        x0 = z[idx]
        ci = cap_idx[idx]  # dropped captions -> "" (torch.where: no host sync, unlike a masked assignment)
        ci = torch.where(torch.rand(args.batch, generator=gen, device=dev) < args.drop, empty, ci)
        u = torch.sigmoid(torch.randn(args.batch // grp, generator=gen, device=dev)) if args.t_sampling == "logit-normal" \
            else torch.rand(args.batch // grp, generator=gen, device=dev).clamp_min(1e-4)
        t = (math.exp(mu) / (math.exp(mu) + (1 / u - 1))).repeat_interleave(grp)
        eps = torch.randn((args.batch // grp, *x0.shape[1:]), generator=gen, device=dev).repeat_interleave(grp, 0)
        xt = (1 - t[:, None, None]) * x0 + t[:, None, None] * eps
        with C.autocast(dev):
            if args.train_text:
                pooled_b = clip(ids_u[ci], output_hidden_states=False).pooler_output
                seq_b = t5(ids2_u[ci], output_hidden_states=False)[0]
            else:
                pooled_b, seq_b = pooled_u[ci], seq_u[ci]
            pred = model(hidden_states=xt, timestep=t, pooled_projections=pooled_b,
                         encoder_hidden_states=seq_b, txt_ids=txt_ids, img_ids=img_ids, guidance=None,
                         return_dict=False)[0]
        pred = pred.float()
        flow = (pred - (eps - x0)).pow(2).mean()
        loss = flow
        if args.shape_contrast:  # the target of the same layout and noise with the next shape of the group
            other = (eps - x0).view(-1, grp, *x0.shape[1:]).roll(-1, dims=1).flatten(0, 1)
            kept = (ci != empty).float()[:, None, None]  # not where the caption was dropped
            loss = loss - args.shape_contrast * ((pred - other).pow(2) * kept).mean()
        if args.aux_attributes:
            heads, lab = trained[3], labels_u[ci]  # lab [B, attributes], -1 = not stated
            aux = 0.0
            with C.autocast(dev):
                for j, k in enumerate(D.LABELS):
                    if cuda:  # the same mean over the stated labels without a host sync per attribute
                        stated = (lab[:, j] >= 0).float()
                        ce = torch.nn.functional.cross_entropy(heads[f"clip_{k}"](pooled_b).float(), lab[:, j].clamp_min(0),
                                                               reduction="none")
                        aux = aux + (ce * stated).sum() / stated.sum().clamp_min(1)
                        tok_logits = heads[f"t5_{k}"](seq_b).float()
                        ce = torch.nn.functional.cross_entropy(tok_logits.transpose(1, 2),
                                                               lab[:, j, None].clamp_min(0).expand(-1, seq_b.shape[1]),
                                                               reduction="none").mean(1)
                        aux = aux + (ce * stated).sum() / stated.sum().clamp_min(1)
                        continue
                    if (lab[:, j] < 0).all():  # no caption of the batch states it (cross_entropy would be nan, grad 0)
                        continue
                    aux = aux + torch.nn.functional.cross_entropy(heads[f"clip_{k}"](pooled_b), lab[:, j], ignore_index=-1)
                    tok_logits = heads[f"t5_{k}"](seq_b)  # [B, MAX_SEQ, classes]: every token, padding included
                    aux = aux + torch.nn.functional.cross_entropy(
                        tok_logits.flatten(0, 1), lab[:, j].repeat_interleave(seq_b.shape[1]), ignore_index=-1)
            aux_hist.append(aux.detach() if cuda else float(aux))
            loss = loss + args.aux_attributes * aux
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trained.parameters(), 1.0)
        opt.step()
        sched.step()
        d = min(args.ema, (1 + step) / (10 + step))
        with torch.no_grad():
            if cuda:
                torch._foreach_lerp_(params_ema, params_trained, 1 - d)
            else:
                for pe, pm in zip(ema_all.parameters(), trained.parameters()):
                    pe.lerp_(pm, 1 - d)
        hist.append(flow.detach() if cuda else flow.item())
        if step % log_every == 0 or (not args.time_budget and step == args.steps - 1):
            aux_s = f" aux {recent(aux_hist):.4f}" if aux_hist else ""
            print(f"step {step} loss {recent(hist):.4f}{aux_s} lr {sched.get_last_lr()[0]:.2e} {clock():.0f}s",
                  flush=True)
        step += 1
        if next_ckpt and budget.elapsed() >= next_ckpt:  # a saved pipeline even if this stage is killed later
            save_pipeline(ema, vae, (tok, ema_all[1], tok2, ema_all[2]) if args.train_text else text,
                          getattr(torch, args.dtype), out)
            print(f"checkpoint: step {step} -> {out} {clock():.0f}s", flush=True)
            next_ckpt += args.checkpoint_every
    steps_done = step
    train_s = budget.elapsed()
    if cuda:  # one read-back of every step's losses
        hist = torch.stack(hist).tolist() if hist else []
        aux_hist = torch.stack(aux_hist).tolist() if aux_hist else []
    print(f"trained {steps_done} steps of {args.batch} in {train_s:.0f}s ({steps_done / max(train_s, 1e-9):.2f} "
          f"steps/s), loss {np.mean(hist[-100:]) if hist else float('nan'):.4f}", flush=True)

    # Final loss of the EMA weights on a fixed held-out batch (same t / noise draws every run).
    with torch.no_grad():
        g = torch.Generator().manual_seed(C.SEED + 22)
        vi, vc, _ = C.data(args.heldout, C.SEED + 1, args.data_cache)
        vx = torch.from_numpy(vi).permute(0, 3, 1, 2).float().div(127.5).sub(1.0).to(dev)
        v0 = C.pack((vae.encode(vx).latent_dist.mean - sh) * sf)
        text_ema = (tok, ema_all[1], tok2, ema_all[2]) if args.train_text else text
        vp, vs = encode_text(vc, *text_ema, dev)
        vp_raw, vs_raw = encode_text(vc, tok, clip, tok2, t5, dev)
        u = torch.sigmoid(torch.randn(args.heldout, generator=g))
        t = (math.exp(mu) / (math.exp(mu) + (1 / u - 1))).to(dev)
        e = torch.randn(v0.shape, generator=g).to(dev)
        vt = (1 - t[:, None, None]) * v0 + t[:, None, None] * e
        val = {}
        for name, m, pp, ss in (("ema", ema, vp, vs), ("raw", model, vp_raw, vs_raw)):
            p = m(hidden_states=vt, timestep=t, pooled_projections=pp, encoder_hidden_states=ss, txt_ids=txt_ids,
                  img_ids=img_ids, guidance=None, return_dict=False)[0]
            val[name] = (p - (e - v0)).pow(2).mean().item()
    train_wall = clock()
    save_pipeline(ema, vae, text_ema, getattr(torch, args.dtype), out)
    log = dict(steps=steps_done, n=args.n, batch=args.batch, lr=args.lr, train_wall_s=round(train_wall, 1),
               train_loop_s=round(train_s, 1), time_budget_s=args.time_budget, device=args.device,
               final_train_loss_last100=float(np.mean(hist[-100:])) if hist else None, heldout_loss_ema=val["ema"],
               heldout_loss_raw=val["raw"], final_aux_loss_last100=float(np.mean(aux_hist[-100:])) if aux_hist else None,
               aux_attributes=args.aux_attributes, shape_groups=args.shape_groups, shape_contrast=args.shape_contrast,
               t_sampling=args.t_sampling, transformer_params=n_params, image_tokens=n_tok, mu=mu,
               max_sequence_length=C.MAX_SEQ, dtype=args.dtype, threads=torch.get_num_threads(),
               train_text=args.train_text, transformer_config=cfg, data_version=D.DATA_VERSION,
               command="python train_flux.py " + " ".join(__import__("sys").argv[1:]))
    (C.WORK / "flux_log.json").write_text(json.dumps(log, indent=2) + "\n")
    print(json.dumps(log, indent=2), flush=True)
    if not args.no_samples:
        prompts = [p for p, _, _ in D.adherence_prompts()[:8]]
        sample_grid(out, C.WORK / "samples.png", prompts)
        print("samples:", C.WORK / "samples.png", flush=True)


if __name__ == "__main__":
    main()
