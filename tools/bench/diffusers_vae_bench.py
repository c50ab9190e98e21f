#!/usr/bin/env python3
"""The Diffusers/PyTorch peer of bench/bench_vae_decode: FLUX.1's AutoencoderKL (the config below, as
black-forest-labs/FLUX.1-dev's vae/config.json), random weights created in the benchmark's dtype, one
random latent [1, 16, size/8, size/8] decoded --repeat times after --warmup decodes, under
torch.inference_mode with torch.set_num_threads(--threads). Prints one JSON line like the diffq bench:
{"engine": "diffusers", "dtype", "size", "threads", "seconds", "median", "min", "peak_rss_gib", "torch",
"diffusers"}. Run with tools/.venv/bin/python (bench/compare_vae.sh does).
"""
import argparse
import json
import resource
import statistics
import time

FLUX_VAE = dict(in_channels=3, out_channels=3, latent_channels=16,
                down_block_types=["DownEncoderBlock2D"] * 4, up_block_types=["UpDecoderBlock2D"] * 4,
                block_out_channels=[128, 256, 512, 512], layers_per_block=2, norm_num_groups=32,
                act_fn="silu", sample_size=1024, scaling_factor=0.3611, shift_factor=0.1159,
                use_quant_conv=False, use_post_quant_conv=False, mid_block_add_attention=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtype", choices=["fp32", "bf16"], default="bf16")
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    if args.size <= 0 or args.size % 8:
        ap.error("--size must be a positive multiple of 8")

    import diffusers
    import torch
    from diffusers import AutoencoderKL

    torch.set_num_threads(args.threads)
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    torch.manual_seed(1234)
    vae = AutoencoderKL(**FLUX_VAE).to(dtype).eval()
    z = torch.randn(1, 16, args.size // 8, args.size // 8, generator=torch.Generator().manual_seed(0)).to(dtype)
    seconds = []
    with torch.inference_mode():
        for _ in range(args.warmup):
            vae.decode(z).sample
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            img = vae.decode(z).sample
            seconds.append(time.perf_counter() - t0)
    assert tuple(img.shape[-2:]) == (args.size, args.size), img.shape
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (1 << 20)  # KiB -> GiB
    print(json.dumps({"engine": "diffusers", "dtype": args.dtype, "size": args.size, "threads": args.threads,
                      "seconds": seconds, "median": statistics.median(seconds), "min": min(seconds),
                      "peak_rss_gib": rss, "torch": torch.__version__, "diffusers": diffusers.__version__}))


if __name__ == "__main__":
    main()
