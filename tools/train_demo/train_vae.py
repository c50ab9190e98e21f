"""Step 2: a small AutoencoderKL (factor 4, 16 latent channels like FLUX's) trained on the procedural images.

Loss: L1 + MSE reconstruction + a small KL term. After training, scaling_factor / shift_factor are computed
from the posterior means of the training images as FLUX's are: shift = mean, scale = 1 / std of (z - shift).
Writes WORK/vae (save_pretrained) and WORK/vae_log.json (wall time, final losses, factors).

    nice -n 19 python train_vae.py [--steps 1500] [--n 8000]
"""
from __future__ import annotations

import argparse
import json

import common as C
import dataset as D


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--n", type=int, default=8000, help="training images")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--kl", type=float, default=1e-6, help="weight of the per-element KL")
    ap.add_argument("--decoder-only", action="store_true",
                    help="continue WORK/vae: its encoder (so the latent space, scaling and shift) stays frozen and "
                         "only the decoder trains; the transformer trained on that latent space stays valid")
    args = ap.parse_args()
    C.setup()
    import numpy as np
    import torch
    from diffusers import AutoencoderKL

    clock = C.Clock()
    images, _, _ = D.make_arrays(args.n, seed=C.SEED)
    x_all = torch.from_numpy(images).permute(0, 3, 1, 2).float().div(127.5).sub(1.0)  # [N, 3, H, W] in [-1, 1]
    print(f"data: {args.n} images in {clock():.0f}s", flush=True)

    torch.manual_seed(C.SEED + 10)
    if args.decoder_only:
        vae = AutoencoderKL.from_pretrained(str(C.WORK / "vae"))
        vae.encoder.requires_grad_(False)
        with torch.no_grad():  # posteriors of every image once: the encoder no longer changes
            posts = [vae.encode(x_all[i:i + 256]).latent_dist for i in range(0, args.n, 256)]
            mean_all = torch.cat([p.mean for p in posts])
            std_all = torch.cat([p.std for p in posts])
        del posts
        trained = vae.decoder
    else:
        vae = AutoencoderKL(scaling_factor=1.0, shift_factor=0.0, **C.VAE_CFG)
        trained = vae
    print("VAE parameters:", sum(p.numel() for p in vae.parameters()), "trained:",
          sum(p.numel() for p in trained.parameters()), flush=True)
    opt = torch.optim.AdamW(trained.parameters(), lr=args.lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=args.lr, total_steps=args.steps, pct_start=0.05)
    gen = torch.Generator().manual_seed(C.SEED + 11)
    hist = []
    for step in range(args.steps):
        idx = torch.randint(0, args.n, (args.batch,), generator=gen)
        x = x_all[idx]
        if args.decoder_only:
            z = mean_all[idx] + std_all[idx] * torch.randn(mean_all[idx].shape, generator=gen)
            kl = torch.zeros(())
        else:
            post = vae.encode(x).latent_dist
            z = post.mean + post.std * torch.randn(post.mean.shape, generator=gen)
            kl = post.kl().mean() / z[0].numel()
        rec = vae.decode(z).sample
        l1 = (rec - x).abs().mean()
        mse = (rec - x).pow(2).mean()
        loss = l1 + mse + args.kl * kl
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trained.parameters(), 1.0)
        opt.step()
        sched.step()
        hist.append((l1.item(), mse.item(), kl.item()))
        if step % 50 == 0 or step == args.steps - 1:
            m = np.mean(hist[-50:], axis=0)
            print(f"step {step} l1 {m[0]:.4f} mse {m[1]:.5f} kl/elem {m[2]:.3f}  {clock():.0f}s", flush=True)

    vae.eval()
    with torch.no_grad():
        zs = torch.cat([vae.encode(x_all[i:i + 256]).latent_dist.mean for i in range(0, args.n, 256)])
        shift = zs.mean().item()
        scale = 1.0 / (zs - shift).std().item()
        if args.decoder_only:  # the latent space the transformer was trained in, unchanged
            shift, scale = vae.config.shift_factor, vae.config.scaling_factor
        rec = torch.cat([vae.decode(zs[i:i + 256]).sample for i in range(0, min(args.n, 1024), 256)])
        mse_eval = (rec.clamp(-1, 1) - x_all[:rec.shape[0]]).pow(2).mean().item()
    psnr = 10 * np.log10(4.0 / mse_eval)
    vae.register_to_config(scaling_factor=round(scale, 4), shift_factor=round(shift, 4))
    vae.save_pretrained(str(C.WORK / "vae"))
    m = np.mean(hist[-100:], axis=0)
    log = dict(steps=args.steps, n=args.n, batch=args.batch, wall_s=round(clock(), 1), final_l1=float(m[0]),
               final_mse=float(m[1]), final_kl_per_elem=float(m[2]), recon_psnr_db=round(float(psnr), 2),
               scaling_factor=round(scale, 4), shift_factor=round(shift, 4),
               params=sum(p.numel() for p in vae.parameters()), decoder_only=args.decoder_only,
               command="python train_vae.py " + " ".join(__import__("sys").argv[1:]))
    (C.WORK / ("vae_decoder_log.json" if args.decoder_only else "vae_log.json")).write_text(json.dumps(log, indent=2) + "\n")
    print(json.dumps(log, indent=2))


if __name__ == "__main__":
    main()
