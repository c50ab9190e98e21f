"""Step 2: a small AutoencoderKL (factor 4, 16 latent channels like FLUX's) trained on the procedural images.

Loss: L1 + MSE reconstruction + a small KL term. After training, scaling_factor / shift_factor are computed
from the posterior means of the training images as FLUX's are: shift = mean, scale = 1 / std of (z - shift).
Writes WORK/vae (save_pretrained) and WORK/vae_log.json (wall time, final losses, factors).

    nice -n 19 python train_vae.py [--steps 1500] [--n 8000]
    python train_vae.py --device cuda --factor 2 --time-budget 50 --batch 256 --n 100000   (device_train.sh)
"""
from __future__ import annotations

import argparse
import json
import math

import common as C
import dataset as D


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--n", type=int, default=8000, help="training images")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--kl", type=float, default=1e-6, help="weight of the per-element KL")
    ap.add_argument("--factor", type=int, default=4, choices=[2, 4],
                    help="spatial downsampling: 4 (common.VAE_CFG, the shipped model's) or 2 (common.VAE_CFG_F2: "
                         "64x64 -> 32x32 latents -> 256 transformer tokens)")
    ap.add_argument("--out", default="", help="folder to save the VAE to (default $DEMO_WORK/vae)")
    ap.add_argument("--decoder-only", action="store_true",
                    help="continue WORK/vae: its encoder (so the latent space, scaling and shift) stays frozen and "
                         "only the decoder trains; the transformer trained on that latent space stays valid")
    C.add_device_args(ap)
    args = ap.parse_args()
    dev = C.setup(device=args.device)
    import numpy as np
    import torch
    from diffusers import AutoencoderKL

    cuda = C.device_path(dev)  # the GPU code path (also on the CPU under DEMO_CPU_AS_DEVICE=1)
    out = C.WORK / "vae" if not args.out else __import__("pathlib").Path(args.out)
    clock = C.Clock()
    images, _, _ = C.data(args.n, C.SEED, args.data_cache)
    if cuda:  # uint8 on the GPU, converted per batch
        x_u8 = torch.from_numpy(images).to(dev).permute(0, 3, 1, 2)
        x_all = None
    else:
        x_all = torch.from_numpy(images).permute(0, 3, 1, 2).float().div(127.5).sub(1.0)  # [N, 3, H, W] in [-1, 1]
    del images

    def batch_x(idx):
        return x_all[idx] if x_all is not None else x_u8[idx].float().div(127.5).sub(1.0)

    def chunks(limit=None, size=256):
        for i in range(0, min(args.n, limit or args.n), size):
            yield batch_x(torch.arange(i, min(i + size, args.n, limit or args.n), device=dev))
    print(f"data: {args.n} images in {clock():.0f}s", flush=True)

    torch.manual_seed(C.SEED + 10)
    if args.decoder_only:
        vae = AutoencoderKL.from_pretrained(str(out)).to(dev)
        vae.encoder.requires_grad_(False)
        with torch.no_grad(), C.autocast(dev):  # posteriors of every image once: the encoder no longer changes
            posts = [vae.encode(x).latent_dist for x in chunks()]
            mean_all = torch.cat([p.mean.float() for p in posts])
            std_all = torch.cat([p.std.float() for p in posts])
        del posts
        trained = vae.decoder
    else:
        vae = AutoencoderKL(scaling_factor=1.0, shift_factor=0.0,
                            **(C.VAE_CFG if args.factor == 4 else C.VAE_CFG_F2)).to(dev)
        trained = vae
    print("VAE parameters:", sum(p.numel() for p in vae.parameters()), "trained:",
          sum(p.numel() for p in trained.parameters()), "factor", 2 ** (len(vae.config.block_out_channels) - 1),
          flush=True)
    opt = torch.optim.AdamW(trained.parameters(), lr=args.lr, weight_decay=0.0, **({"fused": True} if cuda else {}))
    budget = C.Budget(args.time_budget, args.steps)
    if args.time_budget:  # OneCycle's shape (5 % warm-up, cosine down) over the elapsed fraction of the budget
        def one_cycle(step):
            p = budget.progress(step)
            return max(0.04, min(1.0, p / 0.05)) if p < 0.05 else \
                0.01 + 0.99 * 0.5 * (1 + math.cos(math.pi * (p - 0.05) / 0.95))
        sched = torch.optim.lr_scheduler.LambdaLR(opt, one_cycle)
    else:
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=args.lr, total_steps=args.steps, pct_start=0.05)
    gen = torch.Generator(device=dev).manual_seed(C.SEED + 11)
    hist = []
    log_every = 250 if dev.type == "cuda" else 50
    budget.start()
    step = 0
    while not budget.stop(step):
        idx = torch.randint(0, args.n, (args.batch,), generator=gen, device=dev)
        x = batch_x(idx)
        with C.autocast(dev):
            if args.decoder_only:
                z = mean_all[idx] + std_all[idx] * torch.randn(mean_all[idx].shape, generator=gen, device=dev)
                kl = torch.zeros((), device=dev)
            else:
                post = vae.encode(x).latent_dist
                z = post.mean + post.std * torch.randn(post.mean.shape, generator=gen, device=dev)
                kl = post.kl().float().mean() / z[0].numel()
            rec = vae.decode(z).sample.float()
        l1 = (rec - x).abs().mean()
        mse = (rec - x).pow(2).mean()
        loss = l1 + mse + args.kl * kl
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trained.parameters(), 1.0)
        opt.step()
        sched.step()
        hist.append(torch.stack([l1.detach(), mse.detach(), kl.detach().float()]) if cuda else
                    (l1.item(), mse.item(), kl.item()))
        if step % log_every == 0:
            m = np.mean([h.tolist() for h in hist[-50:]] if cuda else hist[-50:], axis=0)
            print(f"step {step} l1 {m[0]:.4f} mse {m[1]:.5f} kl/elem {m[2]:.3f}  {clock():.0f}s", flush=True)
        step += 1
    if cuda:
        hist = [tuple(h.tolist()) for h in torch.stack(hist[-100:]).cpu()] if hist else []
    train_s = budget.elapsed()
    m = np.mean(hist[-50:], axis=0) if hist else [float("nan")] * 3
    print(f"step {step - 1} l1 {m[0]:.4f} mse {m[1]:.5f} kl/elem {m[2]:.3f}  {clock():.0f}s "
          f"(trained {step} steps in {train_s:.0f}s)", flush=True)

    vae.eval()
    with torch.no_grad(), C.autocast(dev):
        stat_n = args.n if not cuda else min(args.n, 50000)  # factors from (up to) 50k images on the GPU
        zs = torch.cat([vae.encode(x).latent_dist.mean.float() for x in chunks(stat_n)])
        shift = zs.mean().item()
        scale = 1.0 / (zs - shift).std().item()
        if args.decoder_only:  # the latent space the transformer was trained in, unchanged
            shift, scale = vae.config.shift_factor, vae.config.scaling_factor
        rec = torch.cat([vae.decode(zs[i:i + 256]).sample.float() for i in range(0, min(args.n, 1024), 256)])
        mse_eval = (rec.clamp(-1, 1) - torch.cat(list(chunks(1024)))).pow(2).mean().item()
    psnr = 10 * np.log10(4.0 / mse_eval)
    vae.register_to_config(scaling_factor=round(scale, 4), shift_factor=round(shift, 4))
    vae.to("cpu").save_pretrained(str(out))
    m = np.mean(hist[-100:], axis=0) if hist else [float("nan")] * 3
    log = dict(steps=step, n=args.n, batch=args.batch, wall_s=round(clock(), 1), train_s=round(train_s, 1),
               final_l1=float(m[0]), final_mse=float(m[1]), final_kl_per_elem=float(m[2]),
               recon_psnr_db=round(float(psnr), 2), scaling_factor=round(scale, 4), shift_factor=round(shift, 4),
               params=sum(p.numel() for p in vae.parameters()), decoder_only=args.decoder_only,
               factor=2 ** (len(vae.config.block_out_channels) - 1), device=args.device,
               command="python train_vae.py " + " ".join(__import__("sys").argv[1:]))
    (C.WORK / ("vae_decoder_log.json" if args.decoder_only else "vae_log.json")).write_text(json.dumps(log, indent=2) + "\n")
    print(json.dumps(log, indent=2))


if __name__ == "__main__":
    main()
