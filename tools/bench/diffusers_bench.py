#!/usr/bin/env python3
"""The Diffusers/PyTorch peer of `diffq bench`: one combination of one model per run, the same JSON line
diffq's worker prints (latency median/min/max over --repeat generations after --warmup 1-step ones,
per-denoising-step times from callback_on_step_end, load time, peak RSS of this process).

Models: builtin:flux-small / builtin:flux-dev-shape (the same configs as src/models/flux/flux_builtin.cpp,
random weights created directly in the combination's dtype, no text encoders or VAE: prompt embeddings
are random, output_type "latent") or a FluxPipeline folder (full pipeline from the prompt).
Combinations: fp32, bf16, fp16 (more as diffq's bench learns them).
Run with tools/.venv/bin/python (bench/compare.sh does).
"""
from __future__ import annotations

import argparse
import json
import resource
import statistics
import time

BUILTIN = {
    "flux-small": dict(num_layers=4, num_single_layers=8, num_attention_heads=12, attention_head_dim=64,
                       axes_dims_rope=(8, 28, 28), text_tokens=128),
    "flux-dev-shape": dict(num_layers=19, num_single_layers=38, num_attention_heads=24, attention_head_dim=128,
                           axes_dims_rope=(16, 56, 56), text_tokens=512),
}
SCHEDULER = dict(shift=3.0, use_dynamic_shifting=True, base_shift=0.5, max_shift=1.15, base_image_seq_len=256,
                 max_image_seq_len=4096)


def parse_combo(text: str):
    import torch

    dtype = torch.float32
    for tok in [t.strip() for t in text.split("+") if t.strip()]:
        if tok in ("fp32", "f32", "float32"):
            dtype = torch.float32
        elif tok in ("bf16", "bfloat16"):
            dtype = torch.bfloat16
        elif tok in ("fp16", "f16", "float16"):
            dtype = torch.float16
        else:
            raise SystemExit(f"combination '{text}': '{tok}' is not supported by this peer yet")
    return dtype


def stats(v):
    v = sorted(v)
    return {"median": statistics.median(v), "min": v[0], "max": v[-1], "n": len(v)} if v else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", default="builtin:flux-small")
    ap.add_argument("--combo", default="fp32")
    ap.add_argument("--size", default="512x512")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--prompt", default="a photo of a cat")
    a = ap.parse_args()

    import torch
    from diffusers import FlowMatchEulerDiscreteScheduler, FluxPipeline, FluxTransformer2DModel
    from diffusers.utils import logging as dlog

    dlog.set_verbosity_error()
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    dtype = parse_combo(a.combo)
    width, height = (int(x) for x in a.size.split("x"))

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
        pipe = FluxPipeline(scheduler=FlowMatchEulerDiscreteScheduler(**SCHEDULER), vae=None, text_encoder=None,
                            tokenizer=None, text_encoder_2=None, tokenizer_2=None, transformer=transformer)
        g = torch.Generator("cpu").manual_seed(1)
        kwargs.update(prompt_embeds=torch.randn(1, text_tokens, 4096, generator=g).to(dtype),
                      pooled_prompt_embeds=torch.randn(1, 768, generator=g).to(dtype), output_type="latent")
    else:
        pipe = FluxPipeline.from_pretrained(a.model, torch_dtype=dtype)
        kwargs.update(prompt=a.prompt)
    pipe.set_progress_bar_config(disable=True)
    load_s = time.perf_counter() - t0

    latencies, steps = [], []
    with torch.inference_mode():
        for r in range(a.warmup + a.repeat):
            timed = r >= a.warmup
            last = [time.perf_counter()]

            def on_step(p, i, t, cb):
                now = time.perf_counter()
                if timed:
                    steps.append(now - last[0])
                last[0] = now
                return {}

            start = last[0]
            pipe(**kwargs, height=height, width=width, num_inference_steps=a.steps if timed else 1,
                 guidance_scale=3.5, generator=torch.Generator("cpu").manual_seed(0), callback_on_step_end=on_step)
            if timed:
                latencies.append(time.perf_counter() - start)
    print(json.dumps({
        "combo": a.combo, "engine": f"diffusers {__import__('diffusers').__version__} / torch {torch.__version__}",
        "model": a.model, "dtype": str(dtype).replace("torch.", ""), "size": a.size, "steps": a.steps,
        "threads": torch.get_num_threads(), "load_s": load_s, "latency_s": stats(latencies), "step_s": stats(steps),
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, "peak_alloc_bytes": None,
        "peak_device_bytes": None}))


if __name__ == "__main__":
    main()
