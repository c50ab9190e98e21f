#!/usr/bin/env bash
# Trains the demo model end to end (issue 22) and writes models/demo-flux + models/demo-flux-classifier.
# Usage: tools/train_demo/train_all.sh [quick]     (quick: a minutes-long smoke run of every step)
# Intermediate files go to $DEMO_WORK (default /tmp/demo-flux-work); logs to $DEMO_WORK/*.log.
set -euo pipefail
cd "$(dirname "$0")"
PY=${PY:-../../tools/.venv/bin/python}
export CUDA_VISIBLE_DEVICES= HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
W=${DEMO_WORK:-/tmp/demo-flux-work}; mkdir -p "$W"
if [[ "${1:-}" == quick ]]; then
  VAE="--steps 60 --n 1000"; FLUX="--steps 40 --n 2000"; CLS="--steps 100 --n 2000"
else
  VAE="--steps ${VAE_STEPS:-1500} --n 8000"; FLUX="--steps ${FLUX_STEPS:-3000} --n 20000"; CLS="--steps 1500"
fi
nice -n 19 "$PY" build_text.py 2>&1 | tee "$W/text.log"
nice -n 19 "$PY" train_vae.py $VAE 2>&1 | tee "$W/vae.log"
nice -n 19 "$PY" train_flux.py $FLUX 2>&1 | tee "$W/flux.log"
nice -n 19 "$PY" classifier.py $CLS 2>&1 | tee "$W/classifier.log"
nice -n 19 "$PY" check_adherence.py --grid "$W/adherence.png" --json "$W/adherence.json" 2>&1 | tee "$W/adherence.log"
