#!/usr/bin/env python3
"""Markdown table of bench/compare_vae.sh's JSON lines: every round's decode seconds (median of the
repeats) for diffq and Diffusers and their ratio, then the median ratio per dtype (min-max over rounds)."""
import json
import statistics
import sys


def main(path):
    rows = [json.loads(line) for line in open(path) if line.strip()]
    if not rows:
        sys.exit("vae_table.py: no rounds in " + path)
    first = rows[0]
    d0, p0 = first["diffq"], first["diffusers"]
    print(f"FLUX.1 VAE decode, {d0['size']}x{d0['size']}, {d0['threads']} threads; peer: diffusers "
          f"{p0['diffusers']} / torch {p0['torch']}")
    print(f"diffq info: {d0['system']}")
    print(f"kernels: {d0['kernels']}\n")
    print("| round | dtype | diffq s | Diffusers s | speed-up |")
    print("|---|---|---|---|---|")
    ratios = {}
    for r in rows:
        d, p = r["diffq"], r["diffusers"]
        ratio = p["median"] / d["median"]
        ratios.setdefault(d["dtype"], []).append(ratio)
        print(f"| {r['round']} | {d['dtype']} | {d['median']:.3f} | {p['median']:.3f} | {ratio:.2f}x |")
    print("\n| dtype | rounds | decode speed-up median (min-max) |")
    print("|---|---|---|")
    for dt, rs in ratios.items():
        print(f"| {dt} | {len(rs)} | {statistics.median(rs):.2f}x ({min(rs):.2f}-{max(rs):.2f}) |")


if __name__ == "__main__":
    main(sys.argv[1])
