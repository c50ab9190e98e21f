"""Tiny random-weight AutoencoderKLWan models (Diffusers 0.42.1) and their decode / encode outputs, for
tests/models/test_wan_vae.cpp.

Three configs (each a model folder written by save_pretrained, weights in bfloat16; the fp32 reference is
computed with those bf16-exact weights upcast, so the fp32 and bf16 runs share the same numbers):
- wan21:      Wan2.1 layout, dim_mult [1,2,2], temperal_downsample [true, true] (x4 in time), no attention
              outside the mid blocks.
- wan21_attn: Wan2.1 layout, attention after the level-1 residual blocks (attn_scales [0.5]),
              temperal_downsample [false, true] (downsample2d and 3d, upsample3d and 2d), 2 res blocks.
              Decode only: Diffusers 0.42.1's encoder cannot run with attn_scales (WanEncoder3d passes
              feat_cache to its WanAttentionBlock, whose forward takes none: TypeError); the decoder
              ignores attn_scales.
- wan22:      Wan2.2 layout: is_residual, patch_size 2 (in/out_channels 12 = 3 * 2 * 2, as Wan2.2's config),
              decoder_base_dim != base_dim, z_dim 6.
Gamma and conv weights are random (seeded); weights are rounded to bf16.

Per config `<name>/reference.safetensors`:
  decode.z [1, z, 3, h, w]; decode.out.T<T> (fp32) and decode.out_bf16.T<T> (the model loaded in bf16, on
  z cast to bf16) for the first T = 1, 2, 3 latent frames.
  encode.x [1, 3, 9, H, W]; encode.out.F<F> / encode.out_bf16.F<F>: the posterior's parameters
  (quant_conv output: mean then logvar) of the first F = 1, 5, 9 frames.
"""
from __future__ import annotations

import torch

from _common import FIXTURES, deterministic, fresh_dir, save_tensors, write_json

CONFIGS = {
    "wan21": dict(base_dim=4, z_dim=4, dim_mult=[1, 2, 2], num_res_blocks=1, attn_scales=[],
                  temperal_downsample=[True, True], latents_mean=[0.0] * 4, latents_std=[1.0] * 4),
    "wan21_attn": dict(base_dim=4, z_dim=4, dim_mult=[1, 2, 2], num_res_blocks=2, attn_scales=[0.5],
                       temperal_downsample=[False, True], latents_mean=[0.0] * 4, latents_std=[1.0] * 4),
    "wan22": dict(base_dim=4, decoder_base_dim=6, z_dim=6, dim_mult=[1, 2, 2], num_res_blocks=1,
                  attn_scales=[], temperal_downsample=[False, True], is_residual=True, patch_size=2, in_channels=12, out_channels=12,
                  latents_mean=[0.0] * 6, latents_std=[1.0] * 6, scale_factor_spatial=8,
                  scale_factor_temporal=2),
}
H, W = 16, 24


def run(vae, fn, x):
    with torch.no_grad():
        return fn(vae, x)


def decode(vae, z):
    return vae.decode(z).sample


def encode(vae, x):
    return vae.encode(x).latent_dist.parameters


def main() -> None:
    deterministic(0)
    from diffusers import AutoencoderKLWan

    root = fresh_dir(FIXTURES / "wan-vae")
    summary = {}
    for name, cfg in CONFIGS.items():
        torch.manual_seed(len(summary) + 1)
        vae = AutoencoderKLWan(**cfg).eval()
        with torch.no_grad():
            for pname, p in vae.named_parameters():
                if pname.endswith("gamma"):
                    p.copy_(1.0 + 0.2 * torch.randn_like(p))
                elif pname.endswith("bias"):
                    p.copy_(0.05 * torch.randn_like(p))
                p.copy_(p.to(torch.bfloat16).float())  # bf16-exact weights
        out_dir = root / name
        vae.to(torch.bfloat16).save_pretrained(out_dir, safe_serialization=True)
        vae.float()
        vae_bf16 = AutoencoderKLWan.from_pretrained(out_dir, torch_dtype=torch.bfloat16).eval()

        f = 2 ** (len(cfg["dim_mult"]) - 1) * cfg.get("patch_size", 1)
        k = 2 ** sum(cfg["temperal_downsample"])
        z = torch.randn(1, cfg["z_dim"], 3, H // f, W // f)
        x = (torch.rand(1, 3, 9, H, W) * 2 - 1)
        t = {"decode.z": z, "encode.x": x}
        can_encode = not cfg["attn_scales"]
        if not can_encode:
            del t["encode.x"]
        for T in (1, 2, 3):
            t[f"decode.out.T{T}"] = run(vae, decode, z[:, :, :T])
            t[f"decode.out_bf16.T{T}"] = run(vae_bf16, decode, z[:, :, :T].to(torch.bfloat16))
        for F in (1, 5, 9) if can_encode else ():
            t[f"encode.out.F{F}"] = run(vae, encode, x[:, :, :F])
            t[f"encode.out_bf16.F{F}"] = run(vae_bf16, encode, x[:, :, :F].to(torch.bfloat16))
        save_tensors(out_dir / "reference.safetensors", t)

        def rel(a, b):
            return float((a.float() - b.float()).abs().max() / b.float().abs().max())

        summary[name] = {
            "decode_shape": list(t["decode.out.T3"].shape),
            "encode_shape": list(t["encode.out.F9"].shape) if can_encode else None,
            "decode_saturated_fraction": float((t["decode.out.T3"].abs() >= 1).float().mean()),
            "bf16_vs_f32_decode": [rel(t[f"decode.out_bf16.T{T}"], t[f"decode.out.T{T}"]) for T in (1, 2, 3)],
            "bf16_vs_f32_encode": [rel(t[f"encode.out_bf16.F{F}"], t[f"encode.out.F{F}"]) for F in (1, 5, 9)]
            if can_encode else None,
        }
    write_json(root / "summary.json", summary)
    print(summary)


if __name__ == "__main__":
    main()
