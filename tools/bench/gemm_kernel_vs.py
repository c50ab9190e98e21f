#!/usr/bin/env python3
"""diffq's blocked GEMM vs OpenBLAS from bench_gemm_diffq's kernel_vs_* benchmarks (stdlib only).

  build/bin/bench_gemm_diffq --benchmark_filter=kernel_vs --benchmark_repetitions=3 \
      --benchmark_min_time=0.1 --benchmark_format=json > vs.json
  tools/bench/gemm_kernel_vs.py vs.json

Per dtype, shape and thread count: the best repetition of each kernel as contention-corrected GFLOP/s
(2MNK / (process CPU time / threads)) and wall GFLOP/s, and the ratio diffq / OpenBLAS of each; then min / median / max of the ratios.
"""
import json
import re
import statistics
import sys

NAME = re.compile(r"^kernel_vs_(?P<dt>f32|bf16)_(?P<kern>openblas|diffq)/M:(?P<m>\d+)/N:(?P<n>\d+)/K:(?P<k>\d+)/threads:(?P<t>\d+)")
UNIT = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}


def main(path):
    with open(path) as f:
        doc = json.load(f)
    best = {}
    for b in doc["benchmarks"]:
        mt = NAME.match(b.get("run_name", b["name"]))
        if not mt or b.get("run_type") == "aggregate" or b.get("error_occurred"):
            continue
        m, n, k, t = int(mt["m"]), int(mt["n"]), int(mt["k"]), int(mt["t"])
        u = UNIT[b.get("time_unit", "ns")]
        flop = 2.0 * m * n * k
        wall = flop / (b["real_time"] * u) * 1e-9
        cpu = flop / (b["cpu_time"] * u / t) * 1e-9
        key = (mt["dt"], t, m, n, k, mt["kern"])
        old = best.get(key, (0.0, 0.0))
        best[key] = (max(old[0], wall), max(old[1], cpu))
    print("| dtype | threads | M | N | K | OpenBLAS cpu GF/s | diffq cpu GF/s | ratio cpu | ratio wall |")
    print("|---|---|---|---|---|---|---|---|---|")
    for key in sorted(k for k in best if k[5] == "openblas"):
        d = key[:5] + ("diffq",)
        if d not in best:
            continue
        (ow, oc), (dw, dc) = best[key], best[d]
        dt, t, m, n, k, _ = key
        print(f"| {dt} | {t} | {m} | {n} | {k} | {oc:.1f} | {dc:.1f} | {dc / oc:.3f} | {dw / ow:.3f} |")
    print()
    print("| dtype | threads | shapes | ratio cpu min / median / max | ratio wall median | diffq cpu GF/s median |")
    print("|---|---|---|---|---|---|")
    groups = sorted({key[:2] for key in best})
    for dt, t in groups:
        rc, rw, g = [], [], []
        for key in best:
            d = key[:5] + ("diffq",)
            if key[:2] == (dt, t) and key[5] == "openblas" and d in best:
                rc.append(best[d][1] / best[key][1])
                rw.append(best[d][0] / best[key][0])
                g.append(best[d][1])
        if rc:
            print(f"| {dt} | {t} | {len(rc)} | {min(rc):.2f} / {statistics.median(rc):.2f} / {max(rc):.2f} | "
                  f"{statistics.median(rw):.2f} | {statistics.median(g):.1f} |")


if __name__ == "__main__":
    main(sys.argv[1])
