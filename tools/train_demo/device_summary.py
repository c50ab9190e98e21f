"""device_train.sh's last step: one summary.json of a run (stages, wall times, steps, losses, adherence) from the
files the stages left in $DEMO_WORK, printed as a few lines too. Standard library only, so it works whatever failed.

    python device_summary.py WORK OUT/summary.json
"""
from __future__ import annotations

import json
import sys
from pathlib import Path


def read_json(p: Path):
    try:
        return json.loads(p.read_text())
    except Exception:  # missing or half-written: the stage failed
        return None


def main():
    work, out = Path(sys.argv[1]), Path(sys.argv[2])
    stages = []
    tsv = work / "logs" / "stages.tsv"
    if tsv.is_file():
        for line in tsv.read_text().splitlines():
            name, rc, wall, *note = line.split("\t")
            stages.append(dict(stage=name, rc=int(rc), wall_s=int(wall), note=note[0] if note else ""))
    vae, flux = read_json(work / "vae_log.json"), read_json(work / "flux_log.json")
    judge = read_json(work / "judge" / "config.json")
    adh = read_json(work / "adherence.json")
    env = read_json(work / "logs" / "env.json")
    s = dict(
        ok=bool(stages) and all(st["rc"] == 0 for st in stages) and adh is not None,
        stages=stages, env=env,
        vae=vae and {k: vae.get(k) for k in ("steps", "batch", "train_s", "wall_s", "recon_psnr_db", "factor",
                                              "params", "scaling_factor", "shift_factor")},
        flux=flux and {k: flux.get(k) for k in ("steps", "batch", "lr", "train_loop_s", "train_wall_s", "n",
                                                "final_train_loss_last100", "heldout_loss_ema", "final_aux_loss_last100",
                                                "transformer_params", "image_tokens", "transformer_config")},
        judge=judge and {k: judge.get(k) for k in ("steps", "batch", "train_wall_s", "heldout_accuracy")},
        adherence=adh and dict(adh.get("summary", {}), classifier_on_truth=(adh.get("classifier_on_truth") or {}).get(
            "right_by_seed_offset", (adh.get("classifier_on_truth") or {}).get("right"))),
    )
    out.write_text(json.dumps(s, indent=2) + "\n")
    print("summary:", "ok" if s["ok"] else "INCOMPLETE (see stages)")
    for st in stages:
        print(f"  {st['stage']:<12} rc {st['rc']:<4} {st['wall_s']:>4}s {st['note']}")
    if vae:
        print(f"  vae: {vae.get('steps')} steps of {vae.get('batch')}, reconstruction {vae.get('recon_psnr_db')} dB")
    if flux:
        print(f"  transformer: {flux.get('steps')} steps of {flux.get('batch')} in {flux.get('train_loop_s')}s, "
              f"held-out loss (EMA) {flux.get('heldout_loss_ema'):.4f}, {flux.get('transformer_params')} parameters")
    if judge:
        print(f"  judge: {judge.get('steps')} steps, held-out accuracy {judge.get('heldout_accuracy')}")
    if adh:
        for off, line in adh.get("summary", {}).items():
            print(f"  adherence, seeds + {off}: {line}")
        truth = (adh.get("classifier_on_truth") or {}).get("right_by_seed_offset", {})
        print("  judge on the true drawings: " + ", ".join(f"{r}/20 (seeds + {o})" for o, r in truth.items()))


if __name__ == "__main__":
    main()
