#!/usr/bin/env bash
# FLUX.1's VAE decode, diffq (build/bin/bench_vae_decode) next to Diffusers/PyTorch
# (tools/bench/diffusers_vae_bench.py): same config, random weights in the same dtype, same latent size
# and threads, in alternating rounds (only ratios of runs made next to each other mean something on a
# drifting VM); prints a markdown table of every round and the median ratio per dtype, keeps the JSON lines.
#   bench/compare_vae.sh [--rounds 3] [--dtypes "fp32 bf16"] [--size 256] [--repeat 3] [--threads 2] [--out f.jsonl]
# The peer needs tools/.venv (tools/reference/setup_venv.sh).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
rounds=3 dtypes="fp32 bf16" size=256 repeat=3 threads=2 out=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rounds) rounds="$2"; shift 2 ;;
    --dtypes) dtypes="$2"; shift 2 ;;
    --size) size="$2"; shift 2 ;;
    --repeat) repeat="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    *) echo "compare_vae.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "compare_vae.sh: --rounds wants a positive integer, got '$rounds'" >&2; exit 2; }
bin="$root/build/bin/bench_vae_decode"
py="$root/tools/.venv/bin/python"
[[ -x "$bin" ]] || { echo "compare_vae.sh: $bin missing: build it (cmake --build build --target bench_vae_decode)" >&2; exit 2; }
[[ -x "$py" ]] || { echo "compare_vae.sh: $py missing: run tools/reference/setup_venv.sh" >&2; exit 2; }
tmp="$(mktemp)"
trap 'rm -f "$tmp"' EXIT
for ((r = 1; r <= rounds; r++)); do
  for dt in $dtypes; do
    args=(--dtype "$dt" --size "$size" --repeat "$repeat" --warmup 1 --threads "$threads")
    echo "[compare_vae] round $r/$rounds: $dt" >&2
    d="$("$bin" "${args[@]}")"
    p="$(OMP_NUM_THREADS="$threads" "$py" "$root/tools/bench/diffusers_vae_bench.py" "${args[@]}")"
    printf '{"round": %d, "diffq": %s, "diffusers": %s}\n' "$r" "$d" "$p" >>"$tmp"
  done
done
if [[ -n "$out" ]]; then
  mkdir -p "$(dirname "$out")"
  cp "$tmp" "$out.tmp" && mv "$out.tmp" "$out"
fi
"$py" "$root/tools/bench/vae_table.py" "$tmp"
