"""tests/fixtures/quant-nunchaku/: Nunchaku Lite checkpoints (Diffusers' quant_method "nunchaku_lite").

Which reference: Diffusers 0.42.1 runs these checkpoints only with the nunchaku CUDA kernels, fetched from
the Hub (`kernels`), and refuses without a CUDA GPU (NunchakuLiteQuantizer.validate_environment); the
nunchaku library itself is GPU-only. So this script is the reference: a torch implementation, written here
from the documented layouts, of
  * the packed tensor layouts the kernels consume (DeepCompressor's NunchakuWeightPacker order for
    qweight / wscales / smooth_factor / bias / proj_down / proj_up, documented in diffuse-compressor's
    docs/nunchaku_weight_packing.md) and the logical layout diffuse-compressor writes for targets that
    miss the kernel tile multiples;
  * the AWQ W4A16 layout of nunchaku-lite-kernels' own test (_pack_awq_codes / _dequantize_awq);
  * the SVDQ W4A4 forward of quantize_w4a4_act_fuse_lora + gemm_w4a4 (smooth, per-token per-64 int4
    activation quantization with scale = amax * (1/7), round half to even, int4 x int4 dot per group,
    scaled by ascale * wscale, plus the low-rank branch and bias), run in float32 on the CPU.

Files:
  linears.safetensors  per-Linear cases: "svdq_packed.*" (N=128, K=128, rank 16: the packed layout,
      bfloat16 tensors as Diffusers' compute dtype), "svdq_logical.*" (N=32, K=128, rank 8, float32),
      "awq.*" (N=32, K=128, bfloat16); each with its checkpoint tensors under "<case>.layer.<key>" and the
      reference under "<case>.ref.*" (codes and logical wscales: the library's dequantization of the residual
      is code * wscale in float32; x, y = the forward of x; dense = code * wscale / smooth + up @ down).
  pipeline/  the tiny FLUX pipeline (tests/fixtures/tiny-flux, components by symlink) with a nunchaku_lite
      transformer: SVDQ targets = the Linears with in_features % 64 == 0 and out_features 32 (logical layout:
      the tiny model misses the 128 tile multiples), AWQ target = the guidance embedder's linear_1. Other
      weights: tiny-flux's rounded to float8_e4m3fn on disk (the fixture budget; both sides load them as
      float32), compute_dtype float32.
  latents.safetensors  "nunchaku": the pipeline's packed latents after the last step with the targets run by
      the torch reference above (float32, CPU), "none": the same transformer weights unquantized.
  cases.json  the call, the targets, and what Diffusers says when asked to load the folder on a CPU.

Run: cd tools/reference && CUDA_VISIBLE_DEVICES= HF_HUB_OFFLINE=1 ../../tools/.venv/bin/python make_quant_nunchaku.py
"""
from __future__ import annotations

import json
import os

from _common import FIXTURES, deterministic, dir_size, fresh_dir, save_tensors, write_json

CALL = dict(prompt="A photo of a Cat sitting on a RED chair, 4k!!", height=32, width=32, num_inference_steps=2,
            guidance_scale=3.5, seed=0, max_sequence_length=64)
SVDQ_TARGETS = ["time_text_embed.timestep_embedder.linear_1", "transformer_blocks.0.ff.net.2",
                "transformer_blocks.0.ff_context.net.2", "transformer_blocks.1.ff.net.2",
                "transformer_blocks.1.ff_context.net.2"]
AWQ_TARGETS = ["time_text_embed.guidance_embedder.linear_1"]
RANK = 16


# ---------------------------------------------------------------- layouts
def packed_layout(n, k, r):
    return n % 128 == 0 and k % 128 == 0 and r % 16 == 0


def pack_qweight(codes, packed):
    """codes int [N, K] in [-8, 7] -> int8 [N, K/2]."""
    import torch

    n, k = codes.shape
    c = codes.to(torch.int32) & 0xF
    if not packed:
        return (c[:, 0::2] | (c[:, 1::2] << 4)).to(torch.uint8).view(torch.int8)
    # n = ((nb*8 + np)*2 + ns)*8 + nl ; k = kb*64 + ks*32 + kl*8 + kr
    t = c.reshape(n // 128, 8, 2, 8, k // 64, 2, 4, 8)  # nb np ns nl kb ks kl kr
    t = t.permute(0, 4, 1, 3, 6, 2, 5, 7).contiguous()  # nb kb np nl kl ns ks kr
    words = (t << (torch.arange(8, dtype=torch.int32) * 4)).sum(-1, dtype=torch.int32)
    return words.contiguous().view(torch.int8).view(n, k // 2)


def pack_vector_groups(v, packed):
    """Logical [G, N] (or [N]) scale-like values -> the kernels' order, same shape."""
    if not packed:
        return v.contiguous()
    g, n = (1, v.shape[0]) if v.dim() == 1 else v.shape
    t = v.reshape(g, n // 128, 8, 2, 4, 2)  # g nb a b c d  (n = nb*128 + a*16 + b*8 + c*2 + d)
    t = t.permute(1, 0, 2, 4, 3, 5).contiguous()  # nb g a c b d
    return t.reshape(v.shape)


def pack_down(down_rk, packed):  # logical lora_down [R, K] -> stored [K, R]
    if not packed:
        return down_rk.t().contiguous()
    r, k = down_rk.shape
    t = down_rk.reshape(r // 16, 2, 8, k // 16, 2, 4, 2)  # ip a b jp p q s
    t = t.permute(3, 0, 2, 5, 1, 4, 6).contiguous()  # jp ip b q a p s
    return t.reshape(k, r)


def pack_up(up_nr, packed):  # logical lora_up [N, R] -> stored [N, R]
    if not packed:
        return up_nr.contiguous()
    n, r = up_nr.shape
    t = up_nr.reshape(n // 16, 2, 8, r // 16, 2, 4, 2)  # ip a b jp p q s
    t = t.permute(0, 3, 2, 5, 1, 4, 6).contiguous()  # ip jp b q a p s
    return t.reshape(n, r)


def awq_pack(codes):
    """unsigned codes [N, K] (0..15) -> int32 [N/4, K/2] (nunchaku-lite-kernels' g64 layout)."""
    import torch

    n, k = codes.shape
    g = k // 64
    words = torch.zeros(n, g, 8, dtype=torch.int64)
    for c in range(64):
        p = (c // 32) * 4 + (c % 8) // 2
        nib = (c % 32) // 8 + 4 * (c % 2)
        words[:, :, p] |= (codes[:, c::64].to(torch.int64) & 0xF) << (4 * nib)
    words = torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)
    return words.view(n // 4, 4, g, 8).permute(0, 2, 1, 3).reshape(n // 4, g * 32)


# ---------------------------------------------------------------- quantizers (SVDQuant / AWQ, simplified)
def svdq_quantize(w, rank, gen):
    """Dense [N, K] -> logical tensors: codes [N, K], wscales [G, N], smooth [K], down [R, K] (x domain),
    up [N, R]. Smoothing from random activation magnitudes, low rank from the SVD of the smoothed weight."""
    import torch

    n, k = w.shape
    smooth = (torch.rand(k, generator=gen) * 1.5 + 0.5).float()
    ws = w.float() * smooth  # smoothed weight (acts on x / smooth)
    u, s, vh = torch.linalg.svd(ws.double(), full_matrices=False)
    up = (u[:, :rank] * s[:rank]).float()
    down_s = vh[:rank].float()
    resid = ws - up @ down_s
    scale = resid.view(n, k // 64, 64).abs().amax(-1).clamp_min(1e-6) / 7  # [N, G]
    codes = torch.round(resid.view(n, k // 64, 64) / scale.unsqueeze(-1)).clamp(-8, 7).to(torch.int8).view(n, k)
    down = down_s / smooth  # the low-rank branch takes the unsmoothed input
    return codes, scale.t().contiguous(), smooth, down, up


def awq_quantize(w):
    import torch

    n, k = w.shape
    g = w.float().view(n, k // 64, 64)
    mn, mx = g.amin(-1), g.amax(-1)
    scale = ((mx - mn) / 15).clamp_min(1e-6)
    codes = torch.round((g - mn.unsqueeze(-1)) / scale.unsqueeze(-1)).clamp(0, 15).to(torch.int32).view(n, k)
    return codes, scale.t().contiguous(), mn.t().contiguous()  # wscales, wzeros [G, N]


# ---------------------------------------------------------------- the math (float32, CPU)
def svdq_forward(x, codes, wscales, smooth, down_rk, up, bias):
    """x [..., K]; codes [N, K]; wscales [G, N]; smooth [K]; down_rk [R, K]; up [N, R]; bias [N] or None."""
    import torch

    shp = x.shape
    x = x.reshape(-1, shp[-1]).float()
    m, k = x.shape
    n = codes.shape[0]
    g = k // 64
    xs = x / smooth.float()
    amax = xs.view(m, g, 64).abs().amax(-1)  # [M, G]
    ascale = amax * torch.tensor(1.0 / 7.0, dtype=torch.float32)
    rs = torch.where(ascale == 0, torch.zeros_like(ascale), 1.0 / ascale)
    q = torch.round(xs.view(m, g, 64) * rs.unsqueeze(-1)).clamp(-8, 7)  # round half to even
    cw = codes.view(n, g, 64).to(torch.int64)
    dots = torch.einsum("mgk,ngk->mgn", q.to(torch.int64), cw).float()  # exact integer dots, [M, G, N]
    y = torch.zeros(m, n, dtype=torch.float32)
    for gi in range(g):
        y = y + dots[:, gi, :] * ascale[:, gi : gi + 1] * wscales[gi].float().unsqueeze(0)
    y = y + (x @ down_rk.float().t()) @ up.float().t()
    if bias is not None:
        y = y + bias.float()
    return y.reshape(*shp[:-1], n)


def make_svdq_modules(torch):
    class SvdqRef(torch.nn.Module):
        def __init__(self, codes, wscales, smooth, down_rk, up, bias):
            super().__init__()
            self.t = (codes, wscales, smooth, down_rk, up, bias)

        def forward(self, x):
            return svdq_forward(x, *self.t).to(x.dtype)

    class AwqRef(torch.nn.Module):
        def __init__(self, weight, bias):
            super().__init__()
            self.w, self.b = weight, bias

        def forward(self, x):
            return torch.nn.functional.linear(x, self.w.to(x.dtype), None if self.b is None else self.b.to(x.dtype))

    return SvdqRef, AwqRef


def awq_dequant(codes, wscales, wzeros):
    n, k = codes.shape
    g = k // 64
    s = wscales.float().t().reshape(n, g, 1)
    z = wzeros.float().t().reshape(n, g, 1)
    return (codes.float().view(n, g, 64) * s + z).view(n, k)


# ---------------------------------------------------------------- fixtures
def linear_cases(out):
    import torch

    gen = torch.Generator().manual_seed(1)
    t = {}
    for case, (n, k, r, dt) in {"svdq_packed": (128, 128, 16, torch.bfloat16),
                                "svdq_logical": (32, 128, 8, torch.float32)}.items():
        w = torch.randn(n, k, generator=gen) * 0.1
        bias = torch.randn(n, generator=gen) * 0.1
        codes, wsc, smooth, down, up = svdq_quantize(w, r, gen)
        # the checkpoint stores the compute dtype; the reference computes with the stored values
        wsc, smooth, down, up, bias = (v.to(dt) for v in (wsc, smooth, down, up, bias))
        packed = packed_layout(n, k, r)
        assert packed == (case == "svdq_packed")
        p = f"{case}.layer."
        t[p + "qweight"] = pack_qweight(codes, packed)
        t[p + "wscales"] = pack_vector_groups(wsc, packed)
        t[p + "smooth_factor"] = pack_vector_groups(smooth, packed)
        t[p + "proj_down"] = pack_down(down, packed)
        t[p + "proj_up"] = pack_up(up, packed)
        t[p + "bias"] = pack_vector_groups(bias, packed)
        x = torch.randn(5, k, generator=gen) * torch.linspace(0.2, 3.0, k)
        x[2, 64:128] = 0  # an all-zero group: ascale 0, codes 0
        t[f"{case}.ref.x"] = x
        t[f"{case}.ref.y"] = svdq_forward(x, codes, wsc, smooth, down, up, bias)
        t[f"{case}.ref.codes"] = codes
        t[f"{case}.ref.wscales"] = wsc.float()  # logical [G, N]: the residual is codes * wscales (float32)
        if not packed:  # (budget: the dense equivalent only for the small case)
            t[f"{case}.ref.dense"] = (codes.float() * wsc.float().t().repeat_interleave(64, dim=1)) / smooth.float() \
                + up.float() @ down.float()
    n, k = 32, 128
    w = torch.randn(n, k, generator=gen) * 0.1
    codes, wsc, wz = awq_quantize(w)
    wsc, wz = wsc.to(torch.bfloat16), wz.to(torch.bfloat16)
    t["awq.layer.qweight"] = awq_pack(codes)
    t["awq.layer.wscales"] = wsc
    t["awq.layer.wzeros"] = wz
    t["awq.ref.weight"] = awq_dequant(codes, wsc, wz)
    save_tensors(out / "linears.safetensors", t)


def pipeline_case(out):
    import torch
    from diffusers import FluxPipeline
    from safetensors.torch import load_file

    tiny = FIXTURES / "tiny-flux"
    folder = out / "pipeline"
    folder.mkdir()
    for comp in ("scheduler", "text_encoder", "text_encoder_2", "tokenizer", "tokenizer_2", "vae"):
        os.symlink(f"../../tiny-flux/{comp}", folder / comp)
    (folder / "model_index.json").write_text((tiny / "model_index.json").read_text())
    (folder / "transformer").mkdir()
    cfg = json.loads((tiny / "transformer" / "config.json").read_text())
    cfg["quantization_config"] = {
        "quant_method": "nunchaku_lite", "compute_dtype": "float32",
        "svdq_w4a4": {"precision": "int4", "group_size": 64, "rank": RANK, "targets": SVDQ_TARGETS},
        "awq_w4a16": {"precision": "int4", "group_size": 64, "targets": AWQ_TARGETS}}
    (folder / "transformer" / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")

    dense = load_file(str(tiny / "transformer" / "diffusion_pytorch_model.safetensors"))
    gen = torch.Generator().manual_seed(2)
    sd, refs = {}, {}
    targets = set(SVDQ_TARGETS) | set(AWQ_TARGETS)
    for key, v in dense.items():
        mod = key.rsplit(".", 1)[0]
        if mod in targets and key.endswith(".weight"):
            continue
        sd[key] = v.to(torch.float8_e4m3fn) if v.is_floating_point() else v  # fixture budget
    for mod in SVDQ_TARGETS:
        w = dense[mod + ".weight"]
        n, k = w.shape
        codes, wsc, smooth, down, up = svdq_quantize(w, RANK, gen)
        packed = packed_layout(n, k, RANK)
        sd[mod + ".qweight"] = pack_qweight(codes, packed)
        sd[mod + ".wscales"] = pack_vector_groups(wsc, packed)
        sd[mod + ".smooth_factor"] = pack_vector_groups(smooth, packed)
        sd[mod + ".proj_down"] = pack_down(down, packed)
        sd[mod + ".proj_up"] = pack_up(up, packed)
        refs[mod] = ("svdq", codes, wsc, smooth, down, up)
    for mod in AWQ_TARGETS:
        codes, wsc, wz = awq_quantize(dense[mod + ".weight"])
        sd[mod + ".qweight"] = awq_pack(codes)
        sd[mod + ".wscales"] = wsc
        sd[mod + ".wzeros"] = wz
        refs[mod] = ("awq", awq_dequant(codes, wsc, wz))
    save_tensors(folder / "transformer" / "diffusion_pytorch_model.safetensors", sd)

    # What Diffusers says about this folder on a CPU.
    try:
        FluxPipeline.from_pretrained(folder, dtype=torch.float32)
        diffusers_says = "loaded (unexpected on a CPU)"
    except Exception as e:  # noqa: BLE001 - recorded: Diffusers cannot run nunchaku_lite here
        diffusers_says = f"{type(e).__name__}: {e}"[:300]

    kwargs = {k: v for k, v in CALL.items() if k != "seed"}

    def run(pipe):
        final = {}

        def catch(p, i, t, cb):
            final["latents"] = cb["latents"].clone()
            return {}

        pipe.set_progress_bar_config(disable=True)
        pipe(**kwargs, generator=torch.Generator("cpu").manual_seed(CALL["seed"]), output_type="latent",
             callback_on_step_end=catch, callback_on_step_end_tensor_inputs=["latents"])
        return final["latents"]

    SvdqRef, AwqRef = make_svdq_modules(torch)

    def build(quantized):
        pipe = FluxPipeline.from_pretrained(tiny, dtype=torch.float32)
        tr = pipe.transformer
        state = {k: v.float() if v.is_floating_point() else v for k, v in sd.items() if k in tr.state_dict()}
        for mod in targets:  # unquantized weights for "none": the dense float32 originals
            state[mod + ".weight"] = dense[mod + ".weight"].float()
        missing, unexpected = tr.load_state_dict(state, strict=False)
        assert not missing and not unexpected, (missing, unexpected)
        if quantized:
            for mod, ref in refs.items():
                parent, _, child = mod.rpartition(".")
                lin = tr.get_submodule(mod)
                b = None if lin.bias is None else lin.bias.detach().clone()
                new = SvdqRef(*ref[1:], b) if ref[0] == "svdq" else AwqRef(ref[1], b)
                setattr(tr.get_submodule(parent), child, new)
        return pipe

    lat = {"nunchaku": run(build(True)), "none": run(build(False))}
    save_tensors(out / "latents.safetensors", lat)
    return diffusers_says


def main() -> None:
    deterministic(0)
    import diffusers
    import torch

    torch.set_grad_enabled(False)
    out = fresh_dir(FIXTURES / "quant-nunchaku")
    linear_cases(out)
    says = pipeline_case(out)
    write_json(out / "cases.json", {
        "call": CALL, "svdq_targets": SVDQ_TARGETS, "awq_targets": AWQ_TARGETS, "rank": RANK,
        "diffusers_version": diffusers.__version__, "diffusers_on_cpu": says,
        "reference": "torch reference of the nunchaku kernels' math (float32, CPU), this script; Diffusers needs "
                     "CUDA and the Hub kernels for nunchaku_lite"})
    print(f"quant-nunchaku: {dir_size(out)} bytes")


if __name__ == "__main__":
    main()
