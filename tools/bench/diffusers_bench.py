#!/usr/bin/env python3
"""The Diffusers/PyTorch peer of `diffq bench`: one combination of one model per run, the same JSON line
diffq's worker prints (latency median/min/max over --repeat generations after --warmup 1-step ones,
per-denoising-step times from callback_on_step_end, load time, peak RSS of this process).

Models: builtin:wan-* and WanPipeline folders go to tools/bench/diffusers_wan_bench.py (same combinations and
JSON line, plus --frames; its docstring says what it builds). FLUX: builtin:flux-small / builtin:flux-dev-shape (the same configs as src/models/flux/flux_builtin.cpp,
random weights created directly in the combination's dtype, no text encoders or VAE: prompt embeddings
are random, output_type "latent") or a FluxPipeline folder (full pipeline from the prompt).
Combinations: a dtype (fp32, bf16, fp16) joined with "+" to at most one quantization scheme and one offload
mode, as diffq bench spells them:
- torchao schemes (int8wo, int8dq, int4wo, fp8wo, fp8dq): torchao's quantize_ on the transformer's Linear
  layers with the config class Diffusers' TorchAoConfig names (what Diffusers runs while loading);
- quanto-int8/int4/int2/fp8: optimum-quanto's quantize + freeze on the transformer (Diffusers' QuantoConfig);
- bitsandbytes (nf4, fp4, int8) and GGUF (q8_0, q4_K, ...): not runnable by Diffusers on a CPU-only machine
  (bitsandbytes' Diffusers integration needs CUDA; GGUF needs a pre-made GGUF file): reported as an error row;
- group-offload[:N], leaf-offload, disk-offload: Diffusers' group offloading of the transformer with
  onload_device=cpu and offload_to_disk_path (diffq's CPU offload modes also keep the weights on disk);
  model-offload / sequential-offload: Diffusers' enable_model_cpu_offload / enable_sequential_cpu_offload;
- compile: transformer.compile_repeated_blocks() (regional torch.compile, as the seeds recommend);
  compile-full: transformer.compile() (torch.compile of the whole transformer). The warm-up generation
  absorbs the compile time.
- step caches, diffq's --cache spec (_peer_cache.py): fbc[:T] -> transformer.enable_cache(FirstBlockCacheConfig(
  threshold=T)), taylorseer[:interval=,order=,before=,after=,dtype=] -> TaylorSeerCacheConfig, magcache[:T][,max_skip=,
  retention=,steps=,calibrate] -> MagCacheConfig(mag_ratios=FLUX_MAG_RATIOS, num_inference_steps=the run's steps
  unless steps= is given, as diffq); teacache has no Diffusers implementation (an error row: diffq only). The
  JSON line then has "cache": {"method", "computed", "skipped"} of the last timed generation (transformer calls
  whose last block's attention ran vs did not, counted with forward hooks).
--save-output FILE (bench/compare.sh --quality): the last timed generation's output as planes [..., H, W] in a
.npy (latents for builtins, FLUX's unpacked to [B, C, H/8, W/8]; pixels in [0, 1] for folders), which
tools/bench/bench_table.py compares with the peer's own reference combination (PSNR, SSIM).
A combination the peer cannot run prints {"combo", "engine", "error"} instead of timings.
Run with tools/.venv/bin/python (bench/compare.sh does).
"""
from __future__ import annotations

from _peer_cache import parse_cache_token
from _peer_timing import prepare_and_time

import argparse
import json
from pathlib import Path
import resource
import statistics
import time

BUILTIN = {
    "flux-small": dict(num_layers=4, num_single_layers=8, num_attention_heads=12, attention_head_dim=64,
                       axes_dims_rope=(8, 28, 28), text_tokens=128),
    "flux-medium": dict(num_layers=16, num_single_layers=24, num_attention_heads=12, attention_head_dim=64,
                        axes_dims_rope=(8, 28, 28), text_tokens=128),
    "flux-dev-shape": dict(num_layers=19, num_single_layers=38, num_attention_heads=24, attention_head_dim=128,
                           axes_dims_rope=(16, 56, 56), text_tokens=512),
    "flux-dev-width": dict(num_layers=1, num_single_layers=2, num_attention_heads=24, attention_head_dim=128,
                           axes_dims_rope=(16, 56, 56), text_tokens=256),
}
SCHEDULER = dict(shift=3.0, use_dynamic_shifting=True, base_shift=0.5, max_shift=1.15, base_image_seq_len=256,
                 max_image_seq_len=4096)


TORCHAO = {"int8wo": "Int8WeightOnlyConfig", "int8dq": "Int8DynamicActivationInt8WeightConfig",
           "int4wo": "Int4WeightOnlyConfig", "fp8wo": "Float8WeightOnlyConfig",
           "fp8dq": "Float8DynamicActivationFloat8WeightConfig"}
NOT_ON_CPU = {"nf4", "fp4", "int8"}  # bitsandbytes through Diffusers needs CUDA
OFFLOAD = ("model", "sequential", "group", "leaf", "disk")


class Unsupported(Exception):
    pass


def parse_combo(text: str):
    import torch

    dtype, quant, offload, compile_mode, cache = torch.float32, None, None, None, None
    for tok in [t.strip() for t in text.split("+") if t.strip()]:
        if parse_cache_token(tok) is not None:
            cache = tok
        elif tok in ("fp32", "f32", "float32"):
            dtype = torch.float32
        elif tok in ("bf16", "bfloat16"):
            dtype = torch.bfloat16
        elif tok in ("fp16", "f16", "float16"):
            dtype = torch.float16
        elif tok in ("compile", "compile-full"):
            compile_mode = "regional" if tok == "compile" else "full"
        elif "-offload" in tok and tok.split("-offload")[0] in OFFLOAD:
            mode, _, n = tok.partition("-offload")
            offload = (mode, int(n[1:]) if n.startswith(":") else 1)
        else:
            quant = tok
    return dtype, quant, offload, compile_mode, cache


def quantize_transformer(transformer, quant: str, dtype, filter_fn=None):
    """Quantizes the transformer in place as Diffusers' quantizer for that backend does while loading
    (filter_fn: torchao's, to leave modules dense)."""
    if quant in TORCHAO:
        import torchao.quantization as tq

        tq.quantize_(transformer, getattr(tq, TORCHAO[quant])(), filter_fn=filter_fn)
    elif quant.startswith("quanto-"):
        from optimum import quanto

        w = {"int8": quanto.qint8, "int4": quanto.qint4, "int2": quanto.qint2, "fp8": quanto.qfloat8}[quant[7:]]
        quanto.quantize(transformer, weights=w)
        quanto.freeze(transformer)
    elif quant in NOT_ON_CPU:
        raise Unsupported(f"{quant}: Diffusers' bitsandbytes integration needs a CUDA GPU")
    else:
        raise Unsupported(f"{quant}: Diffusers loads GGUF only from a GGUF file (it cannot quantize to GGUF)")


def apply_offload(pipe, offload, tmpdir: str):
    mode, n = offload
    if mode == "model":
        pipe.enable_model_cpu_offload(device="cpu")
    elif mode == "sequential":
        pipe.enable_sequential_cpu_offload(device="cpu")
    else:
        pipe.transformer.enable_group_offload(
            onload_device="cpu", offload_type="leaf_level" if mode == "leaf" else "block_level",
            num_blocks_per_group=None if mode == "leaf" else n, use_stream=False, offload_to_disk_path=tmpdir)


def flux_planes(out, latents: bool, width: int, height: int):
    """FluxPipeline's output as planes [..., H, W]: packed latents [B, S, 4C] -> [B, C, H/8, W/8] (as
    FluxPipeline._unpack_latents); images (output_type "np", [N, H, W, 3]) -> [N, 3, H, W]."""
    import numpy as np
    import torch

    if latents:
        b, _, c4 = out.shape
        h2, w2 = height // 16, width // 16
        x = out.float().view(b, h2, w2, c4 // 4, 2, 2).permute(0, 3, 1, 4, 2, 5)
        return x.reshape(b, c4 // 4, 2 * h2, 2 * w2).numpy()
    out = out.float().numpy() if isinstance(out, torch.Tensor) else np.asarray(out, dtype=np.float32)
    return out.transpose(0, 3, 1, 2)


def stats(v):
    v = sorted(v)
    return {"median": statistics.median(v), "min": v[0], "max": v[-1], "n": len(v)} if v else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", default="builtin:flux-small")
    ap.add_argument("--combo", default="fp32")
    ap.add_argument("--size", default=None, help="WIDTHxHEIGHT (default: FLUX 512x512, Wan the model's)")
    ap.add_argument("--frames", type=int, default=0, help="Wan: frames (default: the model's)")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--prompt", default="two red circles on the left on a white background")  # = diffq bench's
    ap.add_argument("--save-output", default=None, help="the last timed output as planes [..., H, W] (.npy)")
    a = ap.parse_args()

    import torch
    from diffusers.utils import logging as dlog

    dlog.set_verbosity_error()
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    dtype, quant, offload, compile_mode, a.cache = parse_combo(a.combo)
    import diffusers_wan_bench as wan

    wan_model = wan.is_wan(a.model)
    if wan_model:
        size, frames = wan.defaults(a.model)
        a.size, a.frames = a.size or size, a.frames or frames
    # A folder's generation_defaults.json (diffq's; models/demo-flux): its size and call arguments, as diffq uses them.
    a.call_defaults = {}
    gd = Path(a.model) / "generation_defaults.json"
    if not a.model.startswith("builtin:") and gd.is_file():
        a.call_defaults = {k: v for k, v in json.loads(gd.read_text()).items() if not k.startswith("_")}
        if not a.size and "width" in a.call_defaults:
            a.size = f"{a.call_defaults['width']}x{a.call_defaults['height']}"
        for k in ("width", "height", "num_inference_steps"):
            a.call_defaults.pop(k, None)
    a.size = a.size or "512x512"
    width, height = (int(x) for x in a.size.split("x"))
    engine = f"diffusers {__import__('diffusers').__version__} / torch {torch.__version__}"
    try:
        if wan_model:
            r = wan.run_wan(a, dtype, quant, offload, compile_mode, width, height, quantize_transformer, apply_offload)
            result = {"model": a.model, "dtype": str(dtype).replace("torch.", ""), "size": a.size, "steps": a.steps,
                      "threads": torch.get_num_threads(), "load_s": r["load_s"], "latency_s": stats(r["latencies"]),
                      "step_s": stats(r["steps"]),
                      "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                      "peak_alloc_bytes": None, "peak_device_bytes": None, "frames": r["frames"],
                      "guidance_scale": r["guidance_scale"],
                      "transformer_passes_per_step": r["transformer_passes_per_step"]}
            extra = r["extra"]
        else:
            result = run(a, dtype=dtype, quant=quant, offload=offload, compile_mode=compile_mode, width=width,
                         height=height)
            extra = result.pop("extra")
    except Exception as e:  # noqa: BLE001 - any failure of the peer is reported, not fatal to compare.sh
        print(json.dumps({"combo": a.combo, "engine": engine, "error": f"{type(e).__name__}: {e}"[:300]}))
        return
    result.update(combo=a.combo, engine=engine, **extra)
    print(json.dumps(result))


def run(a, dtype, quant, offload, compile_mode, width, height):

    import torch
    from diffusers import FlowMatchEulerDiscreteScheduler, FluxPipeline, FluxTransformer2DModel

    t0 = time.perf_counter()
    kwargs = {}
    if a.model.startswith("builtin:"):
        cfg = dict(BUILTIN[a.model[len("builtin:"):]])
        text_tokens = cfg.pop("text_tokens")
        torch.manual_seed(0)
        torch.set_default_dtype(dtype)  # parameters are created in the dtype: no fp32 copy first
        transformer = FluxTransformer2DModel(patch_size=1, in_channels=64, joint_attention_dim=4096,
                                             pooled_projection_dim=768, guidance_embeds=True, **cfg).eval()
        torch.set_default_dtype(torch.float32)
        if quant:
            quantize_transformer(transformer, quant, dtype)
        pipe = FluxPipeline(scheduler=FlowMatchEulerDiscreteScheduler(**SCHEDULER), vae=None, text_encoder=None,
                            tokenizer=None, text_encoder_2=None, tokenizer_2=None, transformer=transformer)
        g = torch.Generator("cpu").manual_seed(1)
        kwargs.update(prompt_embeds=torch.randn(1, text_tokens, 4096, generator=g).to(dtype),
                      pooled_prompt_embeds=torch.randn(1, 768, generator=g).to(dtype), output_type="latent",
                      guidance_scale=3.5)
    else:
        pipe = FluxPipeline.from_pretrained(a.model, torch_dtype=dtype)
        if quant:
            quantize_transformer(pipe.transformer, quant, dtype)
        kwargs.update(prompt=a.prompt, output_type="np", guidance_scale=3.5)
        kwargs.update(a.call_defaults)
    load_s, latencies, steps, extra = prepare_and_time(
        pipe, a, offload, compile_mode, apply_offload, t0,
        lambda n, cb: pipe(**kwargs, height=height, width=width, num_inference_steps=n,
                           generator=torch.Generator("cpu").manual_seed(0), callback_on_step_end=cb).images,
        last_block_attn=lambda t: t.single_transformer_blocks[-1].attn.to_q,
        planes=lambda out: flux_planes(out, a.model.startswith("builtin:"), width, height))
    return {"extra": extra, "model": a.model, "dtype": str(dtype).replace("torch.", ""), "size": a.size, "steps": a.steps,
            "threads": torch.get_num_threads(), "load_s": load_s, "latency_s": stats(latencies),
            "step_s": stats(steps), "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
            "peak_alloc_bytes": None, "peak_device_bytes": None}


if __name__ == "__main__":
    main()
