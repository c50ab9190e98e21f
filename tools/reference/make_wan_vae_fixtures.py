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

Tiling: tiling.safetensors holds Diffusers' tiled decode / encode (enable_tiling with small tiles:
TILED below) of the wan21 model loaded with scale_factor_spatial 4 (its real spatial factor; Diffusers'
tiling works in units of that config value) and of the wan22 model (factor 4 * patch 2 = 8 as configured):
  <name>.decode.z [1, z, 2, h, w] -> <name>.decode.out (fp32) / .out_bf16, a 32x40 video (2x3 tiles);
  encode.x [1, 3, 5, 32, 40] (bf16) -> <name>.encode.out / .out_bf16 (wan21: 2x3 tiles; wan22: 2x3).
summary.json records how far each lies from the untiled result (tiling must change it).
"""
from __future__ import annotations

import json

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
# Per model: config overrides for from_pretrained, enable_tiling's arguments.
TILED = {
    "wan21": (dict(scale_factor_spatial=4),
              dict(tile_sample_min_height=32, tile_sample_min_width=24, tile_sample_stride_height=24,
                   tile_sample_stride_width=16)),
    "wan22": ({}, dict(tile_sample_min_height=16, tile_sample_min_width=12, tile_sample_stride_height=12,
                       tile_sample_stride_width=8)),
}
TH, TW = 32, 40


def run(vae, fn, x):
    with torch.no_grad():
        return fn(vae, x)


def decode(vae, z):
    return vae.decode(z).sample


def encode(vae, x):
    return vae.encode(x).latent_dist.parameters


def make_models(root, name, cfg, seed):
    """The random bf16-exact model of cfg saved to root/name, as an fp32 and a bf16 (reloaded) module."""
    from diffusers import AutoencoderKLWan

    torch.manual_seed(seed)
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
    return out_dir, vae, vae_bf16


def rel(a, b):
    return float((a.float() - b.float()).abs().max() / b.float().abs().max())


def make_tiled(root, summary):
    from diffusers import AutoencoderKLWan

    torch.manual_seed(100)
    x = (torch.rand(1, 3, 5, TH, TW) * 2 - 1).to(torch.bfloat16).float()
    t = {"encode.x": x.to(torch.bfloat16)}  # bf16-exact: stored as bf16
    tiling = {}
    for name, (overrides, tile_args) in TILED.items():
        vae = AutoencoderKLWan.from_pretrained(root / name, torch_dtype=torch.float32, **overrides).eval()
        vae_bf16 = AutoencoderKLWan.from_pretrained(root / name, torch_dtype=torch.bfloat16, **overrides).eval()
        cfg = CONFIGS[name]
        f = 2 ** (len(cfg["dim_mult"]) - 1) * cfg.get("patch_size", 1)
        z = torch.randn(1, cfg["z_dim"], 2, TH // f, TW // f)
        untiled = {"decode": run(vae, decode, z), "encode": run(vae, encode, x)}
        for m in (vae, vae_bf16):
            m.enable_tiling(**tile_args)
        t[f"{name}.decode.z"] = z
        t[f"{name}.decode.out"] = run(vae, decode, z)
        t[f"{name}.decode.out_bf16"] = run(vae_bf16, decode, z.to(torch.bfloat16))
        t[f"{name}.encode.out"] = run(vae, encode, x)
        t[f"{name}.encode.out_bf16"] = run(vae_bf16, encode, x.to(torch.bfloat16))
        tiling[name] = {
            "overrides": overrides,
            "tiling": tile_args,
            "decode_shape": list(t[f"{name}.decode.out"].shape),
            "encode_shape": list(t[f"{name}.encode.out"].shape),
            "tiled_vs_untiled": [rel(t[f"{name}.{k}.out"], untiled[k]) for k in ("decode", "encode")],
            "bf16_vs_f32": [rel(t[f"{name}.{k}.out_bf16"], t[f"{name}.{k}.out"]) for k in ("decode", "encode")],
        }
    save_tensors(root / "tiling.safetensors", t, {"tiling": json.dumps(TILED, sort_keys=True)})
    summary["tiling"] = tiling


def main() -> None:
    deterministic(0)

    root = fresh_dir(FIXTURES / "wan-vae")
    summary = {}
    for name, cfg in CONFIGS.items():
        out_dir, vae, vae_bf16 = make_models(root, name, cfg, seed=len(summary) + 1)

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

        summary[name] = {
            "decode_shape": list(t["decode.out.T3"].shape),
            "encode_shape": list(t["encode.out.F9"].shape) if can_encode else None,
            "decode_saturated_fraction": float((t["decode.out.T3"].abs() >= 1).float().mean()),
            "bf16_vs_f32_decode": [rel(t[f"decode.out_bf16.T{T}"], t[f"decode.out.T{T}"]) for T in (1, 2, 3)],
            "bf16_vs_f32_encode": [rel(t[f"encode.out_bf16.F{F}"], t[f"encode.out.F{F}"]) for F in (1, 5, 9)]
            if can_encode else None,
        }
    make_tiled(root, summary)
    write_json(root / "summary.json", summary)
    print(summary)


if __name__ == "__main__":
    main()
