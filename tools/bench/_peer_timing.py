"""What the Diffusers peers (diffusers_bench.py for FLUX, diffusers_wan_bench.py for Wan) share: offload and
compile the pipeline as the combination asks, then time warmup + repeat calls (per call and per step)."""
from __future__ import annotations

import shutil
import tempfile
import time


def prepare_and_time(pipe, a, offload, compile_mode, apply_offload, t0, call):
    """call(num_inference_steps, callback_on_step_end) runs the pipeline once. Warm-up calls run one step.
    Returns (load_s since t0, latencies, step times) of the timed calls."""
    import torch

    pipe.set_progress_bar_config(disable=True)
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

            start = last[0]
            call(a.steps if timed else 1, on_step)
            if timed:
                latencies.append(time.perf_counter() - start)
    shutil.rmtree(tmpdir, ignore_errors=True)
    return load_s, latencies, steps
