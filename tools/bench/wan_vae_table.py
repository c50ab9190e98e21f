#!/usr/bin/env python3
"""Markdown table of bench/compare_wan_vae.sh's JSON lines: every run's decode seconds (median of the
repeats) and peak RSS for diffq and Diffusers, the speed-up, then the median speed-up per dtype and frame
count (min-max over rounds)."""
import json
import statistics
import sys


def main(path):
    rows = [json.loads(line) for line in open(path) if line.strip()]
    if not rows:
        sys.exit("wan_vae_table.py: no runs in " + path)
    d0, p0 = rows[0]["diffq"], rows[0]["diffusers"]
    print(f"Wan2.1 VAE decode, {d0['height']}x{d0['width']}, {d0['threads']} threads, tiling {d0['tiling']}; "
          f"peer: diffusers {p0['diffusers']} / torch {p0['torch']}")
    print(f"diffq info: {d0['system']}\n")
    print("| round | dtype | frames | diffq s | Diffusers s | speed-up | diffq peak RSS GiB | Diffusers peak RSS GiB |")
    print("|---|---|---|---|---|---|---|---|")
    ratios = {}
    for r in rows:
        d, p = r["diffq"], r["diffusers"]
        ratio = p["median"] / d["median"]
        ratios.setdefault((d["dtype"], d["frames"]), []).append(ratio)
        print(f"| {r['round']} | {d['dtype']} | {d['frames']} | {d['median']:.2f} | {p['median']:.2f} | {ratio:.2f}x | "
              f"{d['peak_rss_gib']:.3f} | {p['peak_rss_gib']:.3f} |")
    print("\n| dtype | frames | rounds | decode speed-up median (min-max) |")
    print("|---|---|---|---|")
    for (dt, f), rs in ratios.items():
        print(f"| {dt} | {f} | {len(rs)} | {statistics.median(rs):.2f}x ({min(rs):.2f}-{max(rs):.2f}) |")


if __name__ == "__main__":
    main(sys.argv[1])
