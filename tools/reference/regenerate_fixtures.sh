#!/usr/bin/env bash
# The one entry point that (re)creates every committed fixture under tests/fixtures/ from the pinned
# reference stack: runs each tools/reference/make_*.py in name order, CPU only, single-threaded, with
# fixed seeds. Running it twice gives identical bytes.
#   tools/reference/regenerate_fixtures.sh              # all make_*.py scripts
#   tools/reference/regenerate_fixtures.sh tiny_flux    # only scripts whose name contains a word given
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
"$here/setup_venv.sh"
py="$root/tools/.venv/bin/python"

# Determinism and isolation: no GPU, one thread, fixed hash seed, never touch the network hubs.
export CUDA_VISIBLE_DEVICES="" PYTHONHASHSEED=0 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
export OPENBLAS_NUM_THREADS=1 CUBLAS_WORKSPACE_CONFIG=:4096:8
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1 DIFFUSERS_VERBOSITY=error
export TRANSFORMERS_VERBOSITY=error TOKENIZERS_PARALLELISM=false PYTHONDONTWRITEBYTECODE=1
export TZ=UTC SOURCE_DATE_EPOCH=0

cd "$root"
shopt -s nullglob
ran=0
for script in "$here"/make_*.py; do
  name="$(basename "$script" .py)"
  if [[ $# -gt 0 ]]; then
    keep=0
    for w in "$@"; do [[ "$name" == *"$w"* ]] && keep=1; done
    [[ $keep == 1 ]] || continue
  fi
  echo "[regenerate] $name"
  "$py" "$script"
  ran=$((ran + 1))
done
echo "[regenerate] ran $ran script(s)"
