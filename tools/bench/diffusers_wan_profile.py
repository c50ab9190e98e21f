#!/usr/bin/env python3
"""Where a Diffusers WanTransformer3DModel forward goes on the CPU: torch.profiler around one forward of a
builtin config (tools/bench/diffusers_wan_bench.py's, random weights in the dtype, Diffusers'
_keep_in_fp32_modules in float32) on that builtin's default latent grid and 512 text tokens, after one
untimed forward; prints the ops by self CPU time. diffq's counterpart:
DIFFQ_PROFILE_OPS=shapes build/bin/diffq bench -m builtin:wan-small --combos bf16 --steps 1 --repeat 1 --warmup 1
(whose table covers every pass of the run).
Run with tools/.venv/bin/python."""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", default="builtin:wan-small")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"])
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--rows", type=int, default=25)
    a = ap.parse_args()

    import torch
    from diffusers import WanTransformer3DModel

    import diffusers_wan_bench as w

    if a.threads > 0:
        torch.set_num_threads(a.threads)
    dt = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    b = w.BUILTIN_WAN[a.model[len("builtin:"):]]
    width, height = (int(x) for x in b["size"].split("x"))
    torch.manual_seed(0)
    torch.set_default_dtype(dt)
    t = WanTransformer3DModel(**w.COMMON, **b["cfg"]).eval()
    torch.set_default_dtype(torch.float32)
    for n, p in t.named_parameters():
        if w.keep_fp32(n, t._keep_in_fp32_modules):
            p.data = p.data.float()
    x = torch.randn(1, 16, (b["frames"] - 1) // 4 + 1, height // 8, width // 8).to(dt)
    e = torch.randn(1, w.TEXT_TOKENS, w.COMMON["text_dim"]).to(dt)
    ts = torch.tensor([999])
    with torch.inference_mode():
        t(x, ts, e)
        with torch.profiler.profile() as prof:
            t0 = time.perf_counter()
            t(x, ts, e)
            print(f"forward {time.perf_counter() - t0:.3f} s")
    print(prof.key_averages(group_by_input_shape=True).table(sort_by="self_cpu_time_total", row_limit=a.rows,
                                                             max_name_column_width=30, max_shapes_column_width=60))


if __name__ == "__main__":
    main()
