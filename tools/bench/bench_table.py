#!/usr/bin/env python3
"""Side-by-side table of `diffq bench --json` and the Diffusers peer's JSON lines (bench/compare.sh).
Ratios: speed-up = peer time / diffq time (> 1: diffq faster); RSS ratio = diffq / peer (< 1: diffq
smaller). One --round per alternation of diffq and the peer (diffq JSON, peer JSON lines, the host's
FMA peak before it); with several rounds, a table row per round and combination, then the median of
each combination's paired ratios. --out writes every run and the command as one JSON file.

Step caches and --quality (diffq bench --quality; the peer's --save-output): a second table per round with
each engine's transformer calls computed / skipped, its latency speed-up over its own reference combination
(the one diffq's quality readout names), and PSNR / SSIM of its output against its own reference output (the
peer's computed here with scikit-image: structural_similarity(gaussian_weights=True, sigma=1.5,
use_sample_covariance=False, data_range=L) per plane, averaged — the SSIM diffq computes)."""
import argparse
import json
import platform
import statistics
import time


def gib(b):
    return "-" if b is None else f"{b / 2**30:.2f}"


def peer_quality(peer, ref_combo, on):
    """{combo: (psnr, ssim)} of the peer's saved outputs against its output of ref_combo."""
    import math

    import numpy as np
    from skimage.metrics import structural_similarity

    ref = peer.get(ref_combo, {}).get("output_file")
    if not ref:
        return {}
    want = np.load(ref).astype(np.float64)
    L = 1.0 if on == "pixels" else float(want.max() - want.min())
    out = {}
    for combo, p in peer.items():
        if not p.get("output_file"):
            continue
        got = np.load(p["output_file"]).astype(np.float64)
        if got.shape != want.shape:
            continue
        mse = float(np.mean((got - want) ** 2))
        psnr = math.inf if mse == 0 else 10 * math.log10(L * L / mse)
        h, w = want.shape[-2:]
        ssim = None
        if h >= 11 and w >= 11:
            ssim = float(structural_similarity(got.reshape(-1, h, w), want.reshape(-1, h, w), channel_axis=0,
                                               gaussian_weights=True, sigma=1.5, use_sample_covariance=False,
                                               data_range=L))
        out[combo] = (psnr, ssim)
    return out


def cache_cell(row):
    c = row.get("cache") if row else None
    return f"{c['computed']} / {c['skipped']}" if c else "-"


def fmt_psnr(v):
    return "-" if v is None else ("inf" if v == float("inf") else f"{v:.2f}")


def fmt_ssim(v):
    return "-" if v is None else f"{v:.4f}"


def cache_quality_table(rounds, many):
    """The second table: calls skipped, speed-up over the reference, PSNR/SSIM vs the reference, both engines."""
    d0 = rounds[0][0]
    has_cache = any("cache" in d for d in d0)
    ref = next((d["quality"]["reference"] for d in d0 if "quality" in d), None)
    if not has_cache and ref is None:
        return
    on = next((d["quality"]["on"] for d in d0 if "quality" in d), "latents")
    print()
    if ref is not None:
        print(f"Against the reference combination '{ref}' of the same engine (same seed): latency speed-up, and "
              f"PSNR / SSIM on the {'final latents (data range: the reference max - min)' if on == 'latents' else 'pixels in [0, 1]'}; "
              "SSIM: 11x11 Gaussian (sigma 1.5), per channel averaged. LPIPS is not computed (it needs a trained network).")
    print(("| round " if many else "") + "| combination | diffq calls computed / skipped | Diffusers calls computed / skipped |"
          " diffq speed-up vs ref | Diffusers speed-up vs ref | diffq PSNR dB | Diffusers PSNR dB | diffq SSIM |"
          " Diffusers SSIM |")
    print(("|---" if many else "") + "|---|---|---|---|---|---|---|---|---|")
    for r, (diffq, peer, _) in enumerate(rounds, 1):
        lead = f"| {r} " if many else ""
        dref = next((d for d in diffq if d["combo"] == ref), None)
        pref = peer.get(ref) if ref else None
        pq = peer_quality(peer, ref, on) if ref else {}
        for d in diffq:
            p = peer.get(d["combo"])
            p = None if p and "error" in p else p
            dspeed = f"{dref['latency_s']['median'] / d['latency_s']['median']:.2f}x" if dref else "-"
            pspeed = (f"{pref['latency_s']['median'] / p['latency_s']['median']:.2f}x"
                      if p and pref and "error" not in pref else "-")
            q = d.get("quality") or {}
            dpsnr = float("inf") if q.get("identical") else q.get("psnr_db")
            ppsnr, pssim = pq.get(d["combo"], (None, None))
            print(f"{lead}| {d['combo']} | {cache_cell(d)} | {cache_cell(p)} | {dspeed} | {pspeed} | "
                  f"{fmt_psnr(dpsnr) if q else '-'} | {fmt_psnr(ppsnr)} | {fmt_ssim(q.get('ssim'))} | {fmt_ssim(pssim)} |")


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
    cache_quality_table(rounds, many)
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
