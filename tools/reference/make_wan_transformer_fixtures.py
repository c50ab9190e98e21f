"""tests/fixtures/wan-transformer/: Diffusers 0.42.1's WanTransformer3DModel on tiny random configs.

Three models, each saved with save_pretrained (float32, safetensors) in its own folder:
- `t2v/`: Wan2.1-style text-to-video: 2 heads x 16 (inner 32), 2 layers, text_dim 16, ffn 32, freq_dim 32,
  in/out 16, patch (1, 2, 2), cross_attn_norm, qk_norm rms_norm_across_heads (RoPE split t 8, h 4, w 4).
- `ti2v/`: Wan2.2 TI2V-5B-style: 2 heads x 12 (inner 24), 2 layers, text_dim 8, ffn 48, freq_dim 16,
  in/out 48 (RoPE split 4, 4, 4); called with one timestep per token (expand_timesteps), the first latent
  frame's tokens at timestep 0 as WanPipeline does for image conditioning.
- `plain/`: cross_attn_norm false (norm2 = Identity), qk_norm null, out_channels null (-> in 4),
  2 heads x 14 (RoPE split 6, 4, 4), 1 layer.
Every norm weight/bias gets N(0, 0.1) noise on top of its constant init, so a port that ignores one fails.

`reference.safetensors`, per case `<case>.`:
- `t2v_f1`: t2v, hidden [2,16,1,4,6], int64 timesteps [999, 250] (UniPC's dtype), text [2,5,16];
- `t2v_f3`: t2v, hidden [2,16,3,4,6], timesteps [500, 37], text [2,7,16];
- `ti2v`: ti2v, hidden [2,48,3,4,6], float32 per-token timesteps [2,18] (first frame's 6 tokens 0, the rest
  700 / 300), text [2,6,8];
- `plain`: plain, hidden [2,4,3,4,6], timesteps [900, 10], text [2,5,16].
Tensors: `in.hidden_states`, `in.timestep`, `in.encoder_hidden_states`, `out` (fp32 forward, [B,C,F,H,W]),
`mid.*` (fp32 intermediates by forward hooks, reshaped to diffq's layout: `patch_embedding` [B,N,D],
`temb` [B,L,D], `timestep_proj` [B,L,6,D] (L = 1, or tokens), `text` [B,S,D], `rope.cos`/`rope.sin` [N,Dh],
`blocks.{i}` [B,N,D], `norm_out` [B,N,D] = proj_out's input), and `out_bf16`: Diffusers' own bf16 forward
(from_pretrained(dtype=bfloat16) of the saved folder, so _keep_in_fp32_modules apply; hidden/text cast to
bf16, timesteps as given).
`expected.json`: the bf16 forward's max relative error against fp32 per case, parameter dtypes of the bf16
load, and Diffusers' parameter counts (meta device, nothing allocated) of the real configs used by
diffq's builtin models (wan-1.3b-shape, wan-14b-shape, wan-small) and of Wan2.2 TI2V-5B.

Run: tools/reference/regenerate_fixtures.sh wan_transformer
"""
from __future__ import annotations

from _common import FIXTURES, deterministic, dir_size, fresh_dir, save_tensors, write_json

SEED = 0

CONFIGS = {
    "t2v": dict(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=16, in_channels=16, out_channels=16,
                text_dim=16, freq_dim=32, ffn_dim=32, num_layers=2, cross_attn_norm=True,
                qk_norm="rms_norm_across_heads", eps=1e-6, rope_max_seq_len=1024),
    "ti2v": dict(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=12, in_channels=48, out_channels=48,
                 text_dim=8, freq_dim=16, ffn_dim=48, num_layers=2, cross_attn_norm=True,
                 qk_norm="rms_norm_across_heads", eps=1e-6, rope_max_seq_len=1024),
    "plain": dict(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=14, in_channels=4, out_channels=None,
                  text_dim=16, freq_dim=32, ffn_dim=32, num_layers=1, cross_attn_norm=False, qk_norm=None,
                  eps=1e-6, rope_max_seq_len=64),
}

# Real configs (Diffusers' defaults otherwise): counted on the meta device.
REAL = {
    "wan-1.3b-shape": dict(num_attention_heads=12, ffn_dim=8960, num_layers=30),
    "wan-14b-shape": dict(num_attention_heads=40, ffn_dim=13824, num_layers=40),
    "wan-small": dict(num_attention_heads=12, ffn_dim=8960, num_layers=2),
    "wan2.2-ti2v-5b": dict(num_attention_heads=24, ffn_dim=14336, num_layers=30, in_channels=48, out_channels=48),
}


def build(name: str):
    import torch
    from diffusers import WanTransformer3DModel

    m = WanTransformer3DModel(**CONFIGS[name]).eval()
    with torch.no_grad():
        for pname, p in m.named_parameters():
            if "norm" in pname:
                p.add_(0.1 * torch.randn_like(p))
    return m


def forward_with_mids(m, hidden, timestep, text):
    import torch

    mids, hooks = {}, []
    B = hidden.shape[0]

    def hook(name, fn):
        mod = m.get_submodule(name)
        hooks.append(mod.register_forward_hook(lambda _m, args, out: fn(args, out)))

    def pe(args, out):
        mids["patch_embedding"] = out.flatten(2).transpose(1, 2)

    def ce(args, out):
        temb, tproj, txt, _ = out
        D = temb.shape[-1]
        mids["temb"] = temb.reshape(B, -1, D)
        mids["timestep_proj"] = tproj.reshape(B, -1, 6, D)
        mids["text"] = txt

    def rope(args, out):
        mids["rope.cos"] = out[0].reshape(out[0].shape[1], -1)
        mids["rope.sin"] = out[1].reshape(out[1].shape[1], -1)

    hook("patch_embedding", pe)
    hook("condition_embedder", ce)
    hook("rope", rope)
    for i in range(len(m.blocks)):
        hook(f"blocks.{i}", lambda args, out, i=i: mids.__setitem__(f"blocks.{i}", out))
    hooks.append(m.proj_out.register_forward_hook(lambda _m, args, out: mids.__setitem__("norm_out", args[0])))
    with torch.no_grad():
        out = m(hidden, timestep, text, return_dict=False)[0]
    for h in hooks:
        h.remove()
    return out, mids


def max_rel(a, b) -> float:
    return float((a.float() - b.float()).abs().max() / b.float().abs().max())


def main() -> None:
    deterministic(SEED)
    import diffusers
    import torch
    from diffusers import WanTransformer3DModel

    root = fresh_dir(FIXTURES / "wan-transformer")
    models = {}
    for name in CONFIGS:
        m = build(name)
        m.save_pretrained(root / name, safe_serialization=True)
        models[name] = WanTransformer3DModel.from_pretrained(root / name, dtype=torch.float32).eval()

    g = torch.Generator().manual_seed(1)
    cases = {}
    cases["t2v_f1"] = ("t2v", torch.randn(2, 16, 1, 4, 6, generator=g), torch.tensor([999, 250], dtype=torch.int64),
                       torch.randn(2, 5, 16, generator=g))
    cases["t2v_f3"] = ("t2v", torch.randn(2, 16, 3, 4, 6, generator=g), torch.tensor([500, 37], dtype=torch.int64),
                       torch.randn(2, 7, 16, generator=g))
    # WanPipeline (expand_timesteps): mask ones except the first latent frame, timestep = (mask[0][0][:, ::2, ::2]
    # * t).flatten() per sample -> float32 [B, F * H/2 * W/2].
    mask = torch.ones(1, 48, 3, 4, 6)
    mask[:, :, 0] = 0
    ts = torch.stack([(mask[0][0][:, ::2, ::2] * t).flatten() for t in (700, 300)])
    cases["ti2v"] = ("ti2v", torch.randn(2, 48, 3, 4, 6, generator=g), ts, torch.randn(2, 6, 8, generator=g))
    cases["plain"] = ("plain", torch.randn(2, 4, 3, 4, 6, generator=g), torch.tensor([900, 10], dtype=torch.int64),
                      torch.randn(2, 5, 16, generator=g))

    tensors, bf16_err, bf16_dtypes = {}, {}, {}
    bf16_models = {name: WanTransformer3DModel.from_pretrained(root / name, dtype=torch.bfloat16).eval()
                   for name in CONFIGS}
    for case, (name, hidden, timestep, text) in cases.items():
        out, mids = forward_with_mids(models[name], hidden, timestep, text)
        with torch.no_grad():
            out_bf16 = bf16_models[name](hidden.to(torch.bfloat16), timestep, text.to(torch.bfloat16),
                                         return_dict=False)[0]
        assert out_bf16.dtype == torch.bfloat16
        bf16_err[case] = max_rel(out_bf16, out)
        p = case + "."
        tensors[p + "in.hidden_states"] = hidden
        tensors[p + "in.timestep"] = timestep
        tensors[p + "in.encoder_hidden_states"] = text
        tensors[p + "out"] = out
        tensors[p + "out_bf16"] = out_bf16
        for k, v in mids.items():
            tensors[p + "mid." + k] = v
    for name, m in bf16_models.items():
        bf16_dtypes[name] = {k: str(v.dtype).replace("torch.", "") for k, v in m.named_parameters()}
        bf16_dtypes[name]["rope.freqs_cos (buffer)"] = str(m.rope.freqs_cos.dtype).replace("torch.", "")
    save_tensors(root / "reference.safetensors", tensors)

    counts = {}
    for name, kw in REAL.items():
        with torch.device("meta"):
            m = WanTransformer3DModel(**kw)
        counts[name] = {"config": kw, "parameters": sum(p.numel() for p in m.parameters())}
    write_json(root / "expected.json", {
        "diffusers": diffusers.__version__, "torch": torch.__version__.split("+")[0],
        "bf16_max_rel_vs_fp32": bf16_err, "bf16_parameter_dtypes": bf16_dtypes, "parameter_counts": counts,
    })
    print("bf16 max rel vs fp32:", bf16_err)
    print("parameter counts:", {k: v["parameters"] for k, v in counts.items()})
    print(f"{root}: {dir_size(root) / 1e6:.3f} MB")


if __name__ == "__main__":
    main()
