#!/usr/bin/env python3
"""Side-by-side table of `diffq bench --json` and the Diffusers peer's JSON lines (bench/compare.sh).
Ratios: speed-up = peer time / diffq time (> 1: diffq faster); RSS ratio = diffq / peer (< 1: diffq
smaller). One --round per alternation of diffq and the peer (diffq JSON, peer JSON lines, the host's
FMA peak before it); with several rounds, a table row per round and combination, then the median of
each combination's paired ratios. --out writes every run and the command as one JSON file."""
import argparse
import json
import platform
import statistics
import time


def gib(b):
    return "-" if b is None else f"{b / 2**30:.2f}"


def load_round(diffq_json, peer_jsonl):
    diffq = json.load(open(diffq_json))
    peer = {r["combo"]: r for r in (json.loads(l) for l in open(peer_jsonl) if l.strip())}
    return diffq, peer


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--round", nargs=3, action="append", required=True, metavar=("DIFFQ_JSON", "PEER_JSONL", "FMA"))
    ap.add_argument("--fma-after", default="-")
    ap.add_argument("--out")
    ap.add_argument("--command", default="")
    a = ap.parse_args()
    rounds = [(*load_round(d, p), fma) for d, p, fma in a.round]
    d0, p0, _ = rounds[0]
    engine = next(iter(p0.values()))["engine"] if p0 else "-"
    frames = f", {d0[0]['frames']} frames" if "frames" in d0[0] else ""
    print(f"model {d0[0]['model']}, {d0[0]['size']}{frames}, {d0[0]['steps']} steps, {d0[0]['threads']} threads; "
          f"peer: {engine}; FMA peak GFLOP/s before each round: {', '.join(f for _, _, f in rounds)}, "
          f"after the last: {a.fma_after}")
    if "note" in d0[0]:
        print(d0[0]["note"] + " (the peer runs the same)")
    system = d0[0].get("system") or {}
    if system:
        print(f"diffq info: {system.get('summary', '-')}")
        print("kernels: " + "; ".join(f"{k}: {v}" for k, v in system.get("kernels", {}).items()))
    many = len(rounds) > 1
    notes, ratios = [], {}
    print()
    print(("| round " if many else "") +
          "| combination | diffq s/step | Diffusers s/step | step speed-up | diffq latency s | Diffusers latency s |"
          " latency speed-up | diffq peak RSS GiB | Diffusers peak RSS GiB | RSS ratio |")
    print(("|---" if many else "") + "|---|---|---|---|---|---|---|---|---|---|")
    for r, (diffq, peer, _) in enumerate(rounds, 1):
        lead = f"| {r} " if many else ""
        for d in diffq:
            p = peer.get(d["combo"])
            ds, dl = d["step_s"]["median"], d["latency_s"]["median"]
            if p and "error" in p:
                note = f"- {d['combo']}: the peer cannot run it ({p['error']})"
                if note not in notes:
                    notes.append(note)
                p = None
            if p:
                ps, pl = p["step_s"]["median"], p["latency_s"]["median"]
                rss = d["peak_rss_bytes"] / p["peak_rss_bytes"]
                ratios.setdefault(d["combo"], []).append((ps / ds, pl / dl, rss))
                print(f"{lead}| {d['combo']} | {ds:.3f} | {ps:.3f} | {ps / ds:.2f}x | {dl:.3f} | {pl:.3f} | "
                      f"{pl / dl:.2f}x | {gib(d['peak_rss_bytes'])} | {gib(p['peak_rss_bytes'])} | {rss:.2f} |")
            else:
                print(f"{lead}| {d['combo']} | {ds:.3f} | - | - | {dl:.3f} | - | - | {gib(d['peak_rss_bytes'])} | - | - |")
    if many and ratios:
        print()
        print("| combination | rounds | step speed-up median (min-max) | latency speed-up median (min-max) |"
              " RSS ratio median |")
        print("|---|---|---|---|---|")
        for combo, rs in ratios.items():
            step, lat, rss = ([x[i] for x in rs] for i in range(3))
            print(f"| {combo} | {len(rs)} | {statistics.median(step):.2f}x ({min(step):.2f}-{max(step):.2f}) | "
                  f"{statistics.median(lat):.2f}x ({min(lat):.2f}-{max(lat):.2f}) | {statistics.median(rss):.2f} |")
    if notes:
        print()
        print("\n".join(notes))
    if a.out:
        with open(a.out + ".tmp", "w") as f:
            json.dump({"command": a.command, "date": time.strftime("%Y-%m-%dT%H:%MZ", time.gmtime()),
                       "machine": system.get("summary") or platform.processor() or platform.machine(),
                       "rounds": [{"fma_peak_gflops": fma, "diffq": d, "diffusers": list(p.values())}
                                  for d, p, fma in rounds],
                       "fma_peak_after_gflops": a.fma_after}, f, indent=2)
            f.write("\n")
        import os
        os.replace(a.out + ".tmp", a.out)


if __name__ == "__main__":
    main()
