#!/usr/bin/env python3
"""scripts/device-check.sh's report: reads the parts' statuses (WORK/parts.jsonl, one {"part", "status",
"seconds", "message"} a line, the last line of a part winning) and their JSON outputs in WORK (gpu_tests.json
from run_gtest.py, parity.jsonl from compare_outputs.py, the diffq bench rows diffq_*.json, the Diffusers
peer's peer.json), and writes OUT/device-check.json and OUT/table.md (the table also to stdout with --print).

  device_report.py --work WORK --out OUT --meta META.json [--print]
Only the standard library.
"""
from __future__ import annotations

import argparse
import json
import os
from collections import OrderedDict

PARTS = ["gpu_tests", "parity", "diffq_flux_step", "diffq_vae", "diffq_wan_step", "peer", "diffq_flux_28",
         "torchao_int4"]


def load(path, default=None):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return default


def bench_row(work, name):
    """The first row of a `diffq bench --json` output (a JSON array), or None."""
    rows = load(os.path.join(work, f"{name}.json"))
    if isinstance(rows, list) and rows and isinstance(rows[0], dict):
        return rows[0]
    return None


def med(row, key):
    try:
        return float(row[key]["median"])
    except (TypeError, KeyError, ValueError):
        return None


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--meta", required=True)
    ap.add_argument("--print", action="store_true")
    args = ap.parse_args()
    meta = load(args.meta, {})
    parts = OrderedDict((p, {"status": "skipped", "seconds": None, "message": "not reached"}) for p in PARTS)
    try:
        for line in open(os.path.join(args.work, "parts.jsonl")):
            try:
                r = json.loads(line)
                parts[r.pop("part")] = r
            except (ValueError, KeyError):
                pass
    except OSError:
        pass

    flux = bench_row(args.work, "diffq_flux_step")
    flux28 = bench_row(args.work, "diffq_flux_28")
    vae = bench_row(args.work, "diffq_vae")
    wan = bench_row(args.work, "diffq_wan_step")
    peer = load(os.path.join(args.work, "peer.json"), {}) or {}
    pp = peer.get("parts", {})

    def pv(part, key, scale=1.0):
        v = pp.get(part, {}).get(key)
        return None if v is None else float(v) * scale

    d = {
        "flux_step_ms": None if med(flux, "step_s") is None else med(flux, "step_s") * 1e3,
        "vae_decode_ms": None if med(vae, "latency_s") is None else med(vae, "latency_s") * 1e3,
        "flux_28_s": med(flux28, "latency_s"),
        "wan_step_ms": None if med(wan, "step_s") is None else med(wan, "step_s") * 1e3,
    }
    d["flux_image_28_s"] = (d["flux_28_s"] + d["vae_decode_ms"] / 1e3
                            if d["flux_28_s"] is not None and d["vae_decode_ms"] is not None else None)
    p = {
        "flux_step_ms": pv("flux_step", "step_ms"),
        "vae_decode_ms": pv("vae_decode", "decode_ms"),
        "flux_28_s": pv("flux_28", "latents_28_s"),
        "flux_image_28_s": pv("flux_28", "image_28_s"),
        "wan_step_ms": pv("wan_step", "cfg_step_ms"),
    }
    rows = [
        ("flux_step_ms", "FLUX.1-dev transformer step, 1024x1024 (ms)", "diffq_flux_step", "flux_step"),
        ("vae_decode_ms", "FLUX.1 VAE decode, 1024x1024 (ms)", "diffq_vae", "vae_decode"),
        ("flux_28_s", "FLUX.1-dev 28 steps to latents, 1024x1024 (s)", "diffq_flux_28", "flux_28"),
        ("flux_image_28_s", "FLUX.1-dev image: 28 steps + decode (s)", "diffq_flux_28", "flux_28"),
        ("wan_step_ms", "Wan2.1-1.3B step, CFG (2 forwards), 480x832x81 (ms)", "diffq_wan_step", "wan_step"),
    ]

    def cell(v, fallback):
        return f"{v:.1f}" if isinstance(v, float) and v >= 10 else (f"{v:.3f}" if isinstance(v, float) else fallback)

    lines = ["", "| bf16, random weights, one GPU | diffq | Diffusers | diffq / Diffusers (time) |", "|---|---|---|---|"]
    table = OrderedDict()
    for key, label, dpart, ppart in rows:
        dv, pvv = d[key], p[key]
        ratio = dv / pvv if dv is not None and pvv else None
        table[key] = {"diffq": dv, "diffusers": pvv, "diffq_over_diffusers": ratio}
        dstat = parts.get(dpart, {}).get("status", "-")
        pstat = pp.get(ppart, {}).get("status") or parts["peer"]["status"]
        lines.append(f"| {label} | {cell(dv, dstat)} | {cell(pvv, pstat)} | "
                     f"{'-' if ratio is None else f'{ratio:.2f}x'} |")
    lines += ["", "diffq's image = its 28 steps + its decode (two runs; the decode's figure is a 1-step 1024x1024 "
              "generation whose transformer and encoders are tiny); Diffusers' = one FluxPipeline call. Neither "
              "runs text encoders (random prompt embeddings).", ""]
    for name, r in parts.items():
        secs = f" ({r['seconds']}s)" if r.get("seconds") is not None else ""
        lines.append(f"- {name}: {r.get('status')}{secs} {r.get('message', '')}".rstrip())
    text = "\n".join(lines) + "\n"

    parity = []
    try:
        parity = [json.loads(l) for l in open(os.path.join(args.work, "parity.jsonl")) if l.strip()]
    except (OSError, ValueError):
        pass
    gt = load(os.path.join(args.work, "gpu_tests.json"), {}) or {}
    res = OrderedDict(meta)
    res["parts"] = parts
    res["gpu_tests"] = {k: gt.get(k) for k in ("tests", "passed", "failed", "crashed", "skipped", "not_run",
                                               "no_device_skips", "processes", "message")} if gt else None
    res["parity"] = parity
    res["table"] = table
    res["diffq_rows"] = {"flux_step": flux, "flux_28": flux28, "vae": vae, "wan_step": wan}
    for r in res["diffq_rows"].values():
        if isinstance(r, dict):
            r.pop("system", None)  # the same machine description four times: kept once in meta
    res["diffusers"] = peer
    res["elapsed_s"] = meta.get("elapsed_s")
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "device-check.json.tmp"), "w") as f:
        f.write(json.dumps(res, indent=1) + "\n")
    os.replace(os.path.join(args.out, "device-check.json.tmp"), os.path.join(args.out, "device-check.json"))
    with open(os.path.join(args.out, "table.md"), "w") as f:
        f.write(text)
    if args.print:
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
