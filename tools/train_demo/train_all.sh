#!/usr/bin/env bash
# Trains the demo model end to end (issue 22) and writes models/demo-flux + models/demo-flux-classifier.
# Usage: tools/train_demo/train_all.sh [quick]     (quick: a minutes-long smoke run of every step)
# Intermediate files go to $DEMO_WORK (default /tmp/demo-flux-work); logs to $DEMO_WORK/*.log.
# Every step runs on one thread pinned to one core (common.NUM_THREADS, DEMO_CORE): the shipped weights were made
# so, and the same machine type then gives the same weights bit for bit (tools/train_demo/README.md).
set -euo pipefail
cd "$(dirname "$0")"
PY=${PY:-../../tools/.venv/bin/python}
export CUDA_VISIBLE_DEVICES= HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
W=${DEMO_WORK:-/tmp/demo-flux-work}; mkdir -p "$W"; export DEMO_WORK=$W
run() { taskset -c "${DEMO_CORE:-0}" "$PY" "$@"; }
if [[ "${1:-}" == quick ]]; then
  VAE="--steps 60 --n 1000"; FLUX="--steps 40 --n 2000"; CLS="--steps 100 --n 2000"
else
  VAE="--steps 1500 --n 8000"; CLS="--steps 6000 --n 30000"
  FLUX=${FLUX_ARGS:-"--steps 6000 --batch 16 --n 20000 --train-text --layers 3 3"}
fi
run build_text.py 2>&1 | tee "$W/text.log"
run train_vae.py $VAE 2>&1 | tee "$W/vae.log"
run train_flux.py $FLUX 2>&1 | tee "$W/flux.log"
run classifier.py $CLS 2>&1 | tee "$W/classifier.log"
for cfg in 1 4; do
  run check_adherence.py --true-cfg $cfg --grid "$W/adherence_cfg$cfg.png" --json "$W/adherence_cfg$cfg.json" 2>&1 |
    tee "$W/adherence_cfg$cfg.log"
done
