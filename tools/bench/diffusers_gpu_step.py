#!/usr/bin/env python3
"""The Diffusers peer of scripts/device-check.sh (issue 7): one FLUX.1-dev-shaped transformer step in
Diffusers on the GPU (random bf16 weights, 4096 image + 512 text tokens = 1024x1024), CUDA-event median of
5 after 2 warm-ups, written as one JSON line with the field names of diffq bench's JSON.
Usage: python3 tools/bench/diffusers_gpu_step.py OUT.json   (needs torch with CUDA and diffusers)
"""
import json, sys, time
import torch
from diffusers import FluxTransformer2DModel
dev, bf = torch.device("cuda"), torch.bfloat16
t0 = time.time()
torch.set_default_dtype(bf)
with dev:
    m = FluxTransformer2DModel(patch_size=1, in_channels=64, num_layers=19, num_single_layers=38,
                               attention_head_dim=128, num_attention_heads=24, joint_attention_dim=4096,
                               pooled_projection_dim=768, guidance_embeds=True, axes_dims_rope=(16, 56, 56)).eval()
torch.set_default_dtype(torch.float32)
load_s = time.time() - t0
g = torch.Generator(device=dev).manual_seed(0)
side, txt = 64, 512
ids = torch.zeros(side, side, 3, device=dev)
ids[..., 1] = torch.arange(side, device=dev)[:, None]
ids[..., 2] = torch.arange(side, device=dev)[None, :]
kw = dict(hidden_states=torch.randn(1, side * side, 64, device=dev, dtype=bf, generator=g),
          encoder_hidden_states=torch.randn(1, txt, 4096, device=dev, dtype=bf, generator=g),
          pooled_projections=torch.randn(1, 768, device=dev, dtype=bf, generator=g),
          timestep=torch.tensor([0.5], device=dev, dtype=bf), guidance=torch.tensor([3.5], device=dev, dtype=bf),
          img_ids=ids.reshape(-1, 3), txt_ids=torch.zeros(txt, 3, device=dev), return_dict=False)
torch.cuda.reset_peak_memory_stats()
ts = []
with torch.inference_mode():
    for i in range(7):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record(); m(**kw); e.record(); torch.cuda.synchronize()
        if i >= 2:
            ts.append(s.elapsed_time(e) / 1e3)
ts.sort()
row = {"engine": "diffusers", "model": "builtin:flux-dev-shape", "combo": "bf16", "size": "1024x1024",
       "what": "one transformer step", "load_s": load_s, "gpu": torch.cuda.get_device_name(0),
       "torch": torch.__version__, "step_s": {"median": ts[len(ts) // 2], "min": ts[0], "max": ts[-1], "n": len(ts)},
       "peak_device_bytes": torch.cuda.max_memory_allocated()}
open(sys.argv[1], "w").write(json.dumps(row, sort_keys=True, separators=(",", ":")) + "\n")
print(json.dumps(row))
