#!/usr/bin/env python3
"""The peer for bench/bench_gemm_*: torch.matmul on the same shapes, layout and thread counts.

C[M,N] = A[M,K] @ B[N,K]^T (a linear layer with [out, in] weights), f32 and bf16 inputs. torch's bf16
matmul accumulates in f32 and returns bf16 (diffq's gemm_bf16 returns f32). Each repetition times a
batch of calls lasting at least --min-time seconds; the best and the median repetition are reported,
and the contention-corrected gflops_cpu_best = 2MNK / (process CPU time / threads) (best repetition),
as for diffq (see tools/bench/gemm_table.py). Prints JSON: {"torch": version, "results": [{m, n, k,
dtype, threads, seconds_best, seconds_median, gflops_best, gflops_median, gflops_cpu_best}, ...]}.
Run with tools/.venv/bin/python (see bench/run_gemm_bench.sh).
"""
import argparse
import json
import statistics
import time

import torch

SHAPES = [(1152, 768, 768), (1152, 3072, 768), (1152, 768, 3072), (4096, 512, 512), (64, 3072, 3072)]


def time_one(fn, min_time, reps):
    fn()  # warm-up (allocations, oneDNN/MKL kernel selection)
    per_call, cpu_per_call = [], []
    for _ in range(reps):
        n, start, cpu_start = 0, time.perf_counter(), time.process_time()
        while True:
            fn()
            n += 1
            elapsed = time.perf_counter() - start
            if elapsed >= min_time:
                break
        per_call.append(elapsed / n)
        cpu_per_call.append((time.process_time() - cpu_start) / n)
    return min(per_call), statistics.median(per_call), min(cpu_per_call)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    ap.add_argument("--dtypes", default="f32,bf16")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--min-time", type=float, default=0.2)
    ap.add_argument("--shapes", default="",
                    help="comma-separated MxNxK (e.g. 1152x3072x3072) instead of the default shapes")
    ap.add_argument("--linear", action="store_true",
                    help="torch.nn.functional.linear(a, b, bias) with a bias of N (as diffq's linear) instead of matmul")
    args = ap.parse_args()
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")] if args.shapes else SHAPES
    dtypes = {"f32": torch.float32, "bf16": torch.bfloat16}
    results = []
    torch.manual_seed(0)
    for threads in [int(t) for t in args.threads.split(",")]:
        torch.set_num_threads(threads)
        for dname in args.dtypes.split(","):
            for m, n, k in shapes:
                a = (torch.rand(m, k) * 2 - 1).to(dtypes[dname])
                b = (torch.rand(n, k) * 2 - 1).to(dtypes[dname])
                bias = (torch.rand(n) * 2 - 1).to(dtypes[dname])
                call = (lambda: torch.nn.functional.linear(a, b, bias)) if args.linear else (lambda: torch.matmul(a, b.t()))
                with torch.inference_mode():
                    best, med, cpu = time_one(call, args.min_time, args.reps)
                flop = 2.0 * m * n * k
                results.append(dict(m=m, n=n, k=k, dtype=dname, threads=threads, seconds_best=best,
                                    seconds_median=med, gflops_best=flop / best * 1e-9,
                                    gflops_median=flop / med * 1e-9,
                                    gflops_cpu_best=flop / (cpu / threads) * 1e-9))
    print(json.dumps({"torch": torch.__version__, "results": results}, indent=1))


if __name__ == "__main__":
    main()
