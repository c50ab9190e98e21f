#!/usr/bin/env python3
"""Markdown tables from the GEMM benchmark JSON (bench/run_gemm_bench.sh calls this; stdlib only).

  gemm_table.py peak PEAK.json
  gemm_table.py compare PEAK.json DIFFQ.json TORCH.json   diffq vs torch.matmul
  gemm_table.py candidates PEAK.json LIB.json...          one column per benchmark family

PEAK.json: bench_fma_peak; DIFFQ/LIB.json: bench_gemm_* (--benchmark_format=json, repetitions);
TORCH.json: tools/bench/torch_gemm.py.

Two figures per result, each the BEST repetition (other load on a shared machine only slows runs):
  wall  GFLOP/s = 2MNK / wall time — what a user sees;
  cpu   GFLOP/s = 2MNK / (process CPU time / threads) — contention-corrected: time the process was
        descheduled does not count (an estimate for threads > 1: it assumes all threads busy).
Peak (the ceiling for "% of peak"): 32 FLOP/cycle/core (AVX2: 2 FMA pipes x 8 lanes x 2) x threads x
the clock bench_fma_peak measured from its single-threaded CPU time.
"""
import json
import re
import sys

NAME = re.compile(r"^(?P<fam>[^/]+)/M:(?P<m>\d+)/N:(?P<n>\d+)/K:(?P<k>\d+)/threads:(?P<t>\d+)")
UNIT = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}


def load(path):
    with open(path) as f:
        return json.load(f)


def best(doc):
    """{(family, m, n, k, threads): (wall GFLOP/s, cpu GFLOP/s, note)}: best repetition of each."""
    out = {}
    for b in doc["benchmarks"]:
        mt = NAME.match(b.get("run_name", b["name"]))
        if not mt or b.get("run_type") == "aggregate":
            continue
        m, n, k, t = int(mt["m"]), int(mt["n"]), int(mt["k"]), int(mt["t"])
        key = (mt["fam"], m, n, k, t)
        if b.get("error_occurred"):
            out[key] = (None, None, b.get("error_message", "error"))
            continue
        cpu = 2.0 * m * n * k / (b["cpu_time"] * UNIT[b["time_unit"]] / t) * 1e-9
        old = out.get(key, (0.0, 0.0, ""))
        out[key] = (max(old[0] or 0.0, b["GFLOP/s"]), max(old[1] or 0.0, cpu), b.get("label", ""))
    return out


def peak_info(doc):
    """(clock GHz from the 1-thread CPU time, {threads: (wall FMA GFLOP/s, cpu-time GHz)})."""
    meas = {}
    for b in doc["benchmarks"]:
        if b.get("run_type") == "aggregate":
            continue
        t = int(re.search(r"threads:(\d+)", b["run_name"]).group(1))
        ghz = b["flop_per_iter"] / (b["cpu_time"] * UNIT[b["time_unit"]] / t) / (32.0 * t) * 1e-9
        old = meas.get(t, (0.0, 0.0))
        meas[t] = (max(old[0], b["GFLOP/s"]), max(old[1], ghz))
    return meas[1][1], meas


def peak(ghz, threads):
    return 32.0 * ghz * threads


def fmt(x, nd=1):
    return "—" if x is None else f"{x:.{nd}f}"


def pct(x, p):
    return "—" if x is None else f"{100 * x / p:.0f}%"


def cmd_peak(peak_json):
    ghz, meas = peak_info(load(peak_json))
    print("| threads | FMA loop wall GFLOP/s | clock from CPU time (GHz) | peak = 32 x GHz(1 thread) x threads (GFLOP/s) |")
    print("|---:|---:|---:|---:|")
    for t in sorted(meas):
        print(f"| {t} | {meas[t][0]:.1f} | {meas[t][1]:.2f} | {peak(ghz, t):.1f} |")


def shape_rows(keys):
    return sorted({k[1:] for k in keys}, key=lambda r: (r[3], r[0] * r[1] * r[2]))


def cmd_compare(peak_json, diffq_json, torch_json):
    ghz, _ = peak_info(load(peak_json))
    d = best(load(diffq_json))
    tr = {(r["dtype"], r["m"], r["n"], r["k"], r["threads"]): (r["gflops_best"], r["gflops_cpu_best"])
          for r in load(torch_json)["results"]}
    fam = {"f32": "diffq_sgemm_f32", "bf16": "diffq_gemm_bf16"}
    print("| M x N x K | dtype | threads | diffq wall GFLOP/s | % of peak | torch wall GFLOP/s | % of peak "
          "| diffq / torch (wall) | diffq cpu GFLOP/s | torch cpu GFLOP/s | diffq / torch (cpu) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for dt in ("f32", "bf16"):
        for m, n, k, t in shape_rows(d):
            g, gc, _ = d.get((fam[dt], m, n, k, t), (None, None, ""))
            tg, tc = tr.get((dt, m, n, k, t), (None, None))
            p = peak(ghz, t)
            rw = g / tg if g and tg else None
            rc = gc / tc if gc and tc else None
            print(f"| {m} x {n} x {k} | {dt} | {t} | {fmt(g)} | {pct(g, p)} | {fmt(tg)} | {pct(tg, p)} | "
                  f"{fmt(rw, 2)} | {fmt(gc)} | {fmt(tc)} | {fmt(rc, 2)} |")


def cmd_candidates(peak_json, *lib_jsons):
    ghz, _ = peak_info(load(peak_json))
    d = {}
    for p in lib_jsons:
        d.update(best(load(p)))
    fams = sorted({k[0] for k in d}, key=lambda f: (not f.endswith("f32"), f))
    print("Cells: wall GFLOP/s (% of peak) [cpu GFLOP/s], best repetition; — = not available.\n")
    print("| M x N x K | threads | " + " | ".join(fams) + " |")
    print("|---|---:|" + "---:|" * len(fams))
    notes = {}
    for m, n, k, t in shape_rows(d):
        cells = []
        for f in fams:
            g, gc, note = d.get((f, m, n, k, t), (None, None, ""))
            if g is None:
                notes[f] = note
                cells.append("—")
            else:
                cells.append(f"{g:.1f} ({pct(g, peak(ghz, t))}) [{gc:.1f}]")
        print(f"| {m} x {n} x {k} | {t} | " + " | ".join(cells) + " |")
    for f, why in notes.items():
        print(f"\n{f}: {why}")


if __name__ == "__main__":
    cmds = {"peak": cmd_peak, "compare": cmd_compare, "candidates": cmd_candidates}
    if len(sys.argv) < 3 or sys.argv[1] not in cmds:
        sys.exit(__doc__)
    cmds[sys.argv[1]](*sys.argv[2:])
