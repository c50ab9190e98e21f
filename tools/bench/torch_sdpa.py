#!/usr/bin/env python3
"""The peer for bench/bench_attention's bf16 cases: torch.nn.functional.scaled_dot_product_attention on the
same shapes ([1, H, Sq, D] queries, [1, H, Sk, D] keys and values, bf16, no mask: PyTorch's CPU flash
attention) and thread count.

Each repetition times a batch of calls lasting at least --min-time seconds; the median repetition is
reported with GFLOP/s = 4 H Sq Sk D / seconds (bench_attention's count). Prints one line per case:
name, ms, GFLOP/s. Run with tools/.venv/bin/python.
"""
import argparse
import statistics
import time

import torch

# name, heads, queries, keys, head dim: bench/bench_attention.cpp's bf16 cases
CASES = [
    ("flux_joint_L1536", 24, 1536, 1536, 128),
    ("flux_joint_L4096", 24, 4096, 4096, 128),
    ("wan13_self_L4680", 12, 4680, 4680, 128),
    ("wan13_cross_L4680x512", 12, 4680, 512, 128),
    ("wan_small_self_L1280", 12, 1280, 1280, 128),
    ("wan_small_cross_L1280x512", 12, 1280, 512, 128),
    ("flux_joint_L768", 24, 768, 768, 128),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--min-time", type=float, default=0.5)
    ap.add_argument("--filter", default="", help="only cases whose name contains this")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, {args.threads} threads, bf16, median of {args.reps}")
    for name, h, sq, sk, d in CASES:
        if args.filter not in name:
            continue
        q = torch.randn(1, h, sq, d).to(torch.bfloat16)
        k = torch.randn(1, h, sk, d).to(torch.bfloat16)
        v = torch.randn(1, h, sk, d).to(torch.bfloat16)
        call = lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v)  # noqa: E731
        call()  # warm-up
        per_call = []
        for _ in range(args.reps):
            n, start = 0, time.perf_counter()
            while True:
                call()
                n += 1
                elapsed = time.perf_counter() - start
                if elapsed >= args.min_time:
                    break
            per_call.append(elapsed / n)
        s = statistics.median(per_call)
        print(f"{name:28s} {s * 1e3:8.2f} ms  {4.0 * h * sq * sk * d / s * 1e-9:8.1f} GFLOP/s")


if __name__ == "__main__":
    main()
