"""What the Diffusers peers (diffusers_bench.py for FLUX, diffusers_wan_bench.py for Wan) share: step-cache,
offload and compile the pipeline as the combination asks, then time warmup + repeat calls (per call and per
step)."""
from __future__ import annotations

import shutil
import tempfile
import time

from _peer_cache import CallCounter, cache_config


def prepare_and_time(pipe, a, offload, compile_mode, apply_offload, t0, call, last_block_attn, planes):
    """call(num_inference_steps, callback_on_step_end) runs the pipeline once and returns its output. Warm-up
    calls run one step. a.cache (a cache token or None): transformer.enable_cache first (before offload and
    compile); last_block_attn(transformer): the module whose calls tell a computed transformer call from a skipped
    one. a.save_output: the last timed output, as planes(output), saved there (.npy). Returns (load_s since t0,
    latencies, step times, extra JSON fields: "cache" of the last timed call)."""
    import numpy as np
    import torch

    pipe.set_progress_bar_config(disable=True)
    counter = None
    if getattr(a, "cache", None):
        pipe.transformer.enable_cache(cache_config(a.cache, a.steps))
        counter = CallCounter(pipe.transformer, last_block_attn(pipe.transformer))
    tmpdir = tempfile.mkdtemp(prefix="diffusers-offload-")
    if offload:
        apply_offload(pipe, offload, tmpdir)
    if compile_mode == "regional":
        pipe.transformer.compile_repeated_blocks()
    elif compile_mode == "full":
        pipe.transformer.compile()
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

            if counter:
                counter.reset()
            start = last[0]
            out = call(a.steps if timed else 1, on_step)
            if timed:
                latencies.append(time.perf_counter() - start)
    shutil.rmtree(tmpdir, ignore_errors=True)
    extra = {"cache": counter.report(a.cache)} if counter else {}
    if getattr(a, "save_output", None):
        np.save(a.save_output, planes(out).astype(np.float32))
        extra["output_file"] = a.save_output
    return load_s, latencies, steps, extra
