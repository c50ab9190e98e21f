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
# The shipped CPU model's data (session 13): dataset.py's v1 geometry. The GPU run (device_train.sh) uses v2.
export DEMO_DATA=${DEMO_DATA:-v1}
W=${DEMO_WORK:-/tmp/demo-flux-work}; mkdir -p "$W"; export DEMO_WORK=$W
run() { taskset -c "${DEMO_CORE:-0}" "$PY" "$@"; }
if [[ "${1:-}" == quick ]]; then
  VAE="--steps 60 --n 1000"; DEC="--steps 40 --n 1000"; CLS="--steps 100 --n 2000"
  FLUX1="--steps 40 --n 2000 --train-text --layers 3 3"; FLUX2="--steps 20 --n 2000"; FLUX3="--steps 20 --n 2000"
  FLUX4="--steps 20 --n 2000"; FLUX5="--steps 20 --n 2000 --aux-attributes 0.1"
else
  # The shipped run, in stages (models/demo-flux/trained_run.json): a VAE, the transformer + text encoders from
  # scratch, the VAE's decoder alone on its frozen latent space, then continuations of the transformer (the last
  # one with the attribute heads on the text encoders, --aux-attributes).
  VAE="--steps 1500 --n 8000"; DEC="--steps 7000 --n 20000 --lr 1e-3"; CLS="--steps 6000 --n 30000"
  FLUX1="--steps 6000 --batch 16 --n 20000 --train-text --layers 3 3"
  FLUX2="--steps 9000 --batch 16 --n 30000 --lr 5e-4"
  FLUX3="--steps 2500 --batch 16 --n 30000 --lr 3e-4 --t-sampling uniform"
  FLUX4="--steps 9000 --batch 16 --n 30000 --lr 3e-4 --t-sampling uniform"
  FLUX5="--steps 9000 --batch 16 --n 30000 --lr 3e-4 --t-sampling uniform --aux-attributes 0.1"
fi
run build_text.py 2>&1 | tee "$W/text.log"
run train_vae.py $VAE 2>&1 | tee "$W/vae.log"
run train_flux.py $FLUX1 --out "$W/stage1" 2>&1 | tee "$W/flux1.log"
run train_vae.py --decoder-only $DEC 2>&1 | tee "$W/vae_decoder.log"
run train_flux.py $FLUX2 --train-text --init "$W/stage1" --out "$W/stage2" 2>&1 | tee "$W/flux2.log"
run train_flux.py $FLUX3 --train-text --init "$W/stage2" --out "$W/stage3" 2>&1 | tee "$W/flux3.log"
run train_flux.py $FLUX4 --train-text --init "$W/stage3" --out "$W/stage4" 2>&1 | tee "$W/flux4.log"
run train_flux.py $FLUX5 --train-text --init "$W/stage4" 2>&1 | tee "$W/flux5.log"   # -> models/demo-flux
run classifier.py $CLS 2>&1 | tee "$W/classifier.log"
for cfg in 1 4; do
  run check_adherence.py --true-cfg $cfg --grid "$W/adherence_cfg$cfg.png" --json "$W/adherence_cfg$cfg.json" 2>&1 |
    tee "$W/adherence_cfg$cfg.log"
done
