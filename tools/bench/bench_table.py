#!/usr/bin/env python3
"""Side-by-side table of `diffq bench --json` and the Diffusers peer's JSON lines (bench/compare.sh).
Ratios: speed-up = peer latency / diffq latency (> 1: diffq faster); RSS ratio = diffq / peer (< 1: diffq
smaller). --out writes both runs and the command as one JSON file."""
import argparse
import json
import platform
import time


def gib(b):
    return "-" if b is None else f"{b / 2**30:.2f}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("diffq_json")
    ap.add_argument("peer_jsonl")
    ap.add_argument("--out")
    ap.add_argument("--command", default="")
    a = ap.parse_args()
    diffq = json.load(open(a.diffq_json))
    peer = {r["combo"]: r for r in (json.loads(l) for l in open(a.peer_jsonl) if l.strip())}
    print(f"model {diffq[0]['model']}, {diffq[0]['size']}, {diffq[0]['steps']} steps, {diffq[0]['threads']} threads; "
          f"peer: {next(iter(peer.values()))['engine'] if peer else '-'}")
    notes = []
    print()
    print("| combination | diffq s/step | Diffusers s/step | step speed-up | diffq latency s | Diffusers latency s |"
          " latency speed-up | diffq peak RSS GiB | Diffusers peak RSS GiB | RSS ratio |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for d in diffq:
        p = peer.get(d["combo"])
        ds, dl = d["step_s"]["median"], d["latency_s"]["median"]
        if p and "error" in p:
            notes.append(f"- {d['combo']}: the peer cannot run it ({p['error']})")
            p = None
        if p:
            ps, pl = p["step_s"]["median"], p["latency_s"]["median"]
            print(f"| {d['combo']} | {ds:.3f} | {ps:.3f} | {ps / ds:.2f}x | {dl:.3f} | {pl:.3f} | {pl / dl:.2f}x | "
                  f"{gib(d['peak_rss_bytes'])} | {gib(p['peak_rss_bytes'])} | "
                  f"{d['peak_rss_bytes'] / p['peak_rss_bytes']:.2f} |")
        else:
            print(f"| {d['combo']} | {ds:.3f} | - | - | {dl:.3f} | - | - | {gib(d['peak_rss_bytes'])} | - | - |")
    if notes:
        print()
        print("\n".join(notes))
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"command": a.command, "date": time.strftime("%Y-%m-%dT%H:%MZ", time.gmtime()),
                       "machine": platform.processor() or platform.machine(), "diffq": diffq,
                       "diffusers": list(peer.values())}, f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    main()
