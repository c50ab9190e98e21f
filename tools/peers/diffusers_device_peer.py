#!/usr/bin/env python3
"""The Diffusers side of scripts/device-check.sh's benchmark table, on the GPU machine, in the same call as
diffq. Random bf16 weights with the real model configs (timings depend on shapes, not on values), batch 1,
CUDA-event medians; the configurations are those of the peer measurements of 2026-11-30 (FLUX.1-dev:
173.1 ms a step at 1024x1024, VAE decode 85.2 ms; Wan2.1-1.3B: 629 ms a forward at 480x832x81).

Parts (--parts, comma list; each has its own try, so one failure leaves the others their figures):
  flux_step   FluxTransformer2DModel, FLUX.1-dev config, one forward at 1024x1024 (4096 image + 512 text
              tokens), median of 5 after 2 warm-ups;
  flux_28     FluxPipeline (that transformer, FLUX.1's VAE and scheduler; no text encoders: random
              prompt_embeds / pooled_prompt_embeds, as diffq's builtin model) at 1024x1024, 28 steps:
              output_type="latent" (the 28 steps alone, as `diffq bench`) and the whole image
              (28 steps + VAE decode + postprocessing to a host array);
  vae_decode  FLUX.1's AutoencoderKL, one [1, 16, 128, 128] latent decoded to 1024x1024, median of 3;
  wan_step    WanTransformer3DModel, Wan2.1-T2V-1.3B config, 480x832x81 (latents [1, 16, 21, 60, 104], 512
              text tokens): one forward, and one CFG step (two forwards, prompt + negative, as WanPipeline
              and `diffq bench` run a step);
  flux_seeds  the seeds' table (quantize, compile and offload): FluxPipeline 1024x1024, 4 steps, random
              prompt embeddings, the transformer's linears bitsandbytes nf4 (bf16 compute; quantized on the
              GPU from random bf16 weights), three rows: quantized; + torch.compile (regional:
              compile_repeated_blocks, the seeds' mode="max-autotune" fullgraph would take minutes here);
              + enable_model_cpu_offload. Latency of a 4-step call after a warm-up call, peak GiB. Needs
              bitsandbytes (else "unavailable"); not in the default parts (a device-check call of its own).
Writes one JSON object to --out ({"env": ..., "parts": {name: {"status", ...figures}}}) and prints it.
The GPU is freed between parts. --budget SECONDS: a part that would start with less than its estimate
left is recorded as skipped. Exit status 0 when every selected part ran, 1 otherwise, 3 without
torch / diffusers / CUDA.
"""
from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
import traceback

ALL = ("flux_step", "flux_28", "vae_decode", "wan_step", "flux_seeds")
DEFAULT = ("flux_step", "flux_28", "vae_decode", "wan_step")
NEEDS_S = {"flux_step": 40, "flux_28": 60, "vae_decode": 20, "wan_step": 40, "flux_seeds": 150}  # rough, H200

FLUX_DEV = dict(patch_size=1, in_channels=64, num_layers=19, num_single_layers=38, attention_head_dim=128,
                num_attention_heads=24, joint_attention_dim=4096, pooled_projection_dim=768,
                guidance_embeds=True, axes_dims_rope=(16, 56, 56))
FLUX_VAE = dict(in_channels=3, out_channels=3, latent_channels=16, down_block_types=["DownEncoderBlock2D"] * 4,
                up_block_types=["UpDecoderBlock2D"] * 4, block_out_channels=[128, 256, 512, 512],
                layers_per_block=2, norm_num_groups=32, act_fn="silu", sample_size=1024, scaling_factor=0.3611,
                shift_factor=0.1159, use_quant_conv=False, use_post_quant_conv=False, mid_block_add_attention=True)
FLUX_SCHEDULER = dict(num_train_timesteps=1000, shift=3.0, use_dynamic_shifting=True, base_shift=0.5,
                      max_shift=1.15, base_image_seq_len=256, max_image_seq_len=4096)
WAN_13B = dict(patch_size=(1, 2, 2), num_attention_heads=12, attention_head_dim=128, in_channels=16,
               out_channels=16, text_dim=4096, freq_dim=256, ffn_dim=8960, num_layers=30, cross_attn_norm=True,
               qk_norm="rms_norm_across_heads", eps=1e-6, rope_max_seq_len=1024)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--parts", default=",".join(DEFAULT))
    ap.add_argument("--budget", type=float, default=300)
    args = ap.parse_args()
    t_start = time.time()
    parts = [p for p in args.parts.split(",") if p]
    for p in parts:
        if p not in ALL:
            ap.error(f"unknown part {p!r} (parts: {','.join(ALL)})")
    res = {"engine": "diffusers", "env": {}, "parts": {}}

    def write():
        with open(args.out, "w") as f:
            f.write(json.dumps(res, sort_keys=True, indent=1) + "\n")

    try:
        import torch
        import diffusers
    except Exception as e:  # noqa: BLE001
        res["error"] = f"torch/diffusers: {type(e).__name__}: {e}"
        write()
        print(json.dumps(res))
        return 3
    if not torch.cuda.is_available():
        res["error"] = "torch sees no CUDA device"
        write()
        print(json.dumps(res))
        return 3
    dev, bf = torch.device("cuda"), torch.bfloat16
    res["env"] = {"torch": torch.__version__, "diffusers": diffusers.__version__,
                  "gpu": torch.cuda.get_device_name(0), "cuda": torch.version.cuda}

    def cuda_ms(fn, warm, reps):
        for _ in range(warm):
            fn()
        torch.cuda.synchronize()
        ts = []
        for _ in range(reps):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            torch.cuda.synchronize()
            ts.append(s.elapsed_time(e))
        return {"median_ms": statistics.median(ts), "min_ms": min(ts), "max_ms": max(ts), "n": len(ts)}

    def on_gpu(cls, **cfg):
        torch.set_default_dtype(bf)
        try:
            with dev:
                return cls(**cfg).eval()
        finally:
            torch.set_default_dtype(torch.float32)

    def flux_inputs():
        g = torch.Generator(device=dev).manual_seed(0)
        side, txt = 64, 512
        ids = torch.zeros(side, side, 3, device=dev)
        ids[..., 1] = torch.arange(side, device=dev)[:, None]
        ids[..., 2] = torch.arange(side, device=dev)[None, :]
        return dict(hidden_states=torch.randn(1, side * side, 64, device=dev, dtype=bf, generator=g),
                    encoder_hidden_states=torch.randn(1, txt, 4096, device=dev, dtype=bf, generator=g),
                    pooled_projections=torch.randn(1, 768, device=dev, dtype=bf, generator=g),
                    timestep=torch.tensor([0.5], device=dev, dtype=bf),
                    guidance=torch.tensor([3.5], device=dev, dtype=bf), img_ids=ids.reshape(-1, 3),
                    txt_ids=torch.zeros(txt, 3, device=dev), return_dict=False)

    flux = {}  # the transformer, kept from flux_step for flux_28

    def flux_model():
        if "m" not in flux:
            t0 = time.time()
            flux["m"] = on_gpu(diffusers.FluxTransformer2DModel, **FLUX_DEV)
            flux["init_s"] = time.time() - t0
        return flux["m"]

    def part_flux_step():
        m = flux_model()
        kw = flux_inputs()
        torch.cuda.reset_peak_memory_stats()
        with torch.inference_mode():
            r = cuda_ms(lambda: m(**kw), 2, 5)
        return {"what": "one FLUX.1-dev transformer forward, 1024x1024", "step_ms": r["median_ms"], "timing": r,
                "init_s": flux["init_s"], "peak_gib": torch.cuda.max_memory_allocated() / 2**30}

    def flux_pipeline(m):
        """FluxPipeline around transformer m with FLUX.1's VAE, no text encoders, and random prompt embeddings."""
        vae = on_gpu(diffusers.AutoencoderKL, **FLUX_VAE)
        pipe = diffusers.FluxPipeline(scheduler=diffusers.FlowMatchEulerDiscreteScheduler(**FLUX_SCHEDULER),
                                      vae=vae, text_encoder=None, tokenizer=None, text_encoder_2=None,
                                      tokenizer_2=None, transformer=m)
        pipe.set_progress_bar_config(disable=True)
        g = torch.Generator(device=dev).manual_seed(0)
        emb = torch.randn(1, 512, 4096, device=dev, dtype=bf, generator=g)
        pooled = torch.randn(1, 768, device=dev, dtype=bf, generator=g)
        return pipe, vae, emb, pooled

    def part_flux_28():
        m = flux_model()
        pipe, vae, emb, pooled = flux_pipeline(m)

        def run(steps, output_type):
            return pipe(prompt_embeds=emb, pooled_prompt_embeds=pooled, height=1024, width=1024,
                        num_inference_steps=steps, guidance_scale=3.5, output_type=output_type,
                        generator=torch.Generator(device=dev).manual_seed(1))

        def wall(fn):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            return time.perf_counter() - t0

        torch.cuda.reset_peak_memory_stats()
        with torch.inference_mode():
            wall(lambda: run(2, "np"))  # warm-up: the decode's and the scheduler's first calls too
            lat = wall(lambda: run(28, "latent"))
            img = wall(lambda: run(28, "np"))
        del pipe, vae
        return {"what": "FluxPipeline 1024x1024, 28 steps, random prompt embeddings (no text encoders)",
                "latents_28_s": lat, "image_28_s": img, "peak_gib": torch.cuda.max_memory_allocated() / 2**30}

    def part_vae_decode():
        vae = on_gpu(diffusers.AutoencoderKL, **FLUX_VAE)
        z = torch.randn(1, 16, 128, 128, device=dev, dtype=bf, generator=torch.Generator(device=dev).manual_seed(0))
        torch.cuda.reset_peak_memory_stats()
        with torch.inference_mode():
            r = cuda_ms(lambda: vae.decode(z), 1, 3)
        del vae
        return {"what": "FLUX.1 AutoencoderKL decode, [1,16,128,128] -> 1024x1024", "decode_ms": r["median_ms"],
                "timing": r, "peak_gib": torch.cuda.max_memory_allocated() / 2**30}

    def part_wan_step():
        flux.clear()
        gc.collect()
        torch.cuda.empty_cache()
        t0 = time.time()
        m = on_gpu(diffusers.WanTransformer3DModel, **WAN_13B)
        init_s = time.time() - t0
        g = torch.Generator(device=dev).manual_seed(0)
        x = torch.randn(1, 16, 21, 60, 104, device=dev, dtype=bf, generator=g)
        ctx = torch.randn(1, 512, 4096, device=dev, dtype=bf, generator=g)
        neg = torch.randn(1, 512, 4096, device=dev, dtype=bf, generator=g)
        t = torch.tensor([500], device=dev)
        torch.cuda.reset_peak_memory_stats()
        with torch.inference_mode():
            one = cuda_ms(lambda: m(hidden_states=x, timestep=t, encoder_hidden_states=ctx, return_dict=False), 1, 3)
            cfg = cuda_ms(lambda: (m(hidden_states=x, timestep=t, encoder_hidden_states=ctx, return_dict=False),
                                   m(hidden_states=x, timestep=t, encoder_hidden_states=neg, return_dict=False)), 0, 2)
        del m
        return {"what": "Wan2.1-T2V-1.3B transformer, 480x832x81 (32760 tokens)", "forward_ms": one["median_ms"],
                "cfg_step_ms": cfg["median_ms"], "timing_forward": one, "timing_cfg_step": cfg, "init_s": init_s,
                "peak_gib": torch.cuda.max_memory_allocated() / 2**30}

    def part_flux_seeds():
        try:
            import bitsandbytes as bnb
        except Exception as e:  # noqa: BLE001
            return {"status": "unavailable", "why": f"bitsandbytes: {type(e).__name__}: {e}"}
        flux.clear()
        gc.collect()
        torch.cuda.empty_cache()
        m = on_gpu(diffusers.FluxTransformer2DModel, **FLUX_DEV)

        def nf4(mod):  # every nn.Linear -> bnb Linear4bit (nf4, bf16 compute), quantized on the GPU
            for name, child in list(mod.named_children()):
                if isinstance(child, torch.nn.Linear):
                    q = bnb.nn.Linear4bit(child.in_features, child.out_features, bias=child.bias is not None,
                                          compute_dtype=bf, quant_type="nf4", device="meta")
                    q.weight = bnb.nn.Params4bit(child.weight.data, requires_grad=False, quant_type="nf4")
                    if child.bias is not None:
                        q.bias = torch.nn.Parameter(child.bias.data, requires_grad=False)
                    setattr(mod, name, q.to(dev))
                else:
                    nf4(child)

        with torch.no_grad():
            nf4(m)
        gc.collect()
        torch.cuda.empty_cache()
        pipe, vae, emb, pooled = flux_pipeline(m)

        def call():
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            pipe(prompt_embeds=emb, pooled_prompt_embeds=pooled, height=1024, width=1024, num_inference_steps=4,
                 guidance_scale=3.5, output_type="np", generator=torch.Generator(device=dev).manual_seed(1))
            torch.cuda.synchronize()
            return time.perf_counter() - t0

        rows = {}
        with torch.inference_mode():
            for row in ("quantized", "quantized+compile", "quantized+compile+model_offload"):
                if row == "quantized+compile":
                    torch._dynamo.config.capture_dynamic_output_shape_ops = True
                    torch._dynamo.config.cache_size_limit = 1000
                    pipe.transformer.compile_repeated_blocks(fullgraph=False)
                if row.endswith("model_offload"):
                    pipe.enable_model_cpu_offload()
                first = call()  # warm-up (compiles)
                torch.cuda.reset_peak_memory_stats()
                rows[row] = {"latency_s": call(), "first_call_s": first,
                             "peak_gib": torch.cuda.max_memory_allocated() / 2**30}
        del pipe, vae, m
        return {"what": "the seeds' rows: FluxPipeline 1024x1024, 4 steps, transformer nf4 (bitsandbytes)",
                "bitsandbytes": bnb.__version__, "rows": rows}

    fns = {"flux_step": part_flux_step, "flux_28": part_flux_28, "vae_decode": part_vae_decode,
           "wan_step": part_wan_step, "flux_seeds": part_flux_seeds}
    all_ok = True
    for p in parts:
        left = args.budget - (time.time() - t_start)
        if left < NEEDS_S[p]:
            res["parts"][p] = {"status": "skipped", "why": f"{left:.0f} s left of --budget, the part needs ~{NEEDS_S[p]} s"}
            all_ok = False
        else:
            t0 = time.time()
            try:
                res["parts"][p] = {"status": "ok"}
                res["parts"][p].update(fns[p]())
            except Exception as e:  # noqa: BLE001
                res["parts"][p] = {"status": "failed", "error": f"{type(e).__name__}: {e}"[:500],
                                   "traceback": traceback.format_exc(limit=3)[-1500:]}
                all_ok = False
            res["parts"][p]["seconds"] = time.time() - t0
        print(f"[peer] {p}: {json.dumps({k: v for k, v in res['parts'][p].items() if k != 'traceback'})}", flush=True)
        write()
    flux.clear()
    res["elapsed_s"] = time.time() - t_start
    write()
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
