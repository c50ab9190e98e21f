#!/usr/bin/env python3
"""The Diffusers/PyTorch peer of bench/bench_wan_vae: Wan2.1's AutoencoderKLWan (Diffusers' default config,
which is Wan-AI/Wan2.1-T2V-*-Diffusers' vae/config.json: base_dim 96, z_dim 16, dim_mult [1, 2, 4, 4],
num_res_blocks 2), random weights created in the benchmark's dtype, one random latent
[1, 16, 1 + (frames-1)/4, height/8, width/8] decoded --repeat times after --warmup decodes, under
torch.inference_mode with torch.set_num_threads(--threads); --tiling 1 calls enable_tiling() (256 / 192).
Prints one JSON line like the diffq bench: {"engine": "diffusers", "dtype", "frames", "height", "width",
"threads", "tiling", "seconds", "median", "min", "peak_rss_gib", "torch", "diffusers"}. peak_rss_gib is the
process' peak (ru_maxrss) at the end, weights and torch itself included. Run with tools/.venv/bin/python
(bench/compare_wan_vae.sh does).
"""
import argparse
import json
import resource
import statistics
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtype", choices=["fp32", "bf16"], default="bf16")
    ap.add_argument("--frames", type=int, default=9)
    ap.add_argument("--height", type=int, default=240)
    ap.add_argument("--width", type=int, default=416)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tiling", type=int, default=0)
    args = ap.parse_args()
    if args.frames < 1 or (args.frames - 1) % 4:
        ap.error("--frames must be 1 + 4k")
    if args.height % 8 or args.width % 8:
        ap.error("--height/--width must be multiples of 8")

    import diffusers
    import torch
    from diffusers import AutoencoderKLWan

    torch.set_num_threads(args.threads)
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    torch.manual_seed(1234)
    with torch.device("cpu"):
        vae = AutoencoderKLWan().to(dtype).eval()
    if args.tiling:
        vae.enable_tiling()
    t = 1 + (args.frames - 1) // 4
    z = torch.randn(1, 16, t, args.height // 8, args.width // 8,
                    generator=torch.Generator().manual_seed(0)).to(dtype)
    seconds = []
    with torch.inference_mode():
        for _ in range(args.warmup):
            vae.decode(z).sample
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            video = vae.decode(z).sample
            seconds.append(time.perf_counter() - t0)
            assert tuple(video.shape[2:]) == (args.frames, args.height, args.width), video.shape
            del video
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (1 << 20)  # KiB -> GiB
    print(json.dumps({"engine": "diffusers", "dtype": args.dtype, "frames": args.frames, "height": args.height,
                      "width": args.width, "threads": args.threads, "tiling": args.tiling, "seconds": seconds,
                      "median": statistics.median(seconds), "min": min(seconds), "peak_rss_gib": rss,
                      "torch": torch.__version__, "diffusers": diffusers.__version__}))


if __name__ == "__main__":
    main()
