#!/usr/bin/env bash
# Wan2.1's video VAE decode, diffq (build/bin/bench_wan_vae) next to Diffusers/PyTorch
# (tools/bench/diffusers_wan_vae_bench.py): same config, random weights in the same dtype, same latent,
# frames and threads, in alternating rounds (one process per run, never two at once); prints a markdown
# table of every run (seconds and peak RSS) and the median speed-up per dtype, keeps the JSON lines.
#   bench/compare_wan_vae.sh [--rounds 1] [--dtypes "fp32 bf16"] [--frames "9"] [--height 240] [--width 416]
#                            [--repeat 1] [--warmup 1] [--threads 2] [--tiling 0] [--out f.jsonl]
# --frames takes a list: a memory comparison is e.g. --frames "9 81" --warmup 0 --repeat 1.
# The peer needs tools/.venv (tools/reference/setup_venv.sh).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
rounds=1 dtypes="fp32 bf16" frames="9" height=240 width=416 repeat=1 warmup=1 threads=2 tiling=0 out=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rounds) rounds="$2"; shift 2 ;;
    --dtypes) dtypes="$2"; shift 2 ;;
    --frames) frames="$2"; shift 2 ;;
    --height) height="$2"; shift 2 ;;
    --width) width="$2"; shift 2 ;;
    --repeat) repeat="$2"; shift 2 ;;
    --warmup) warmup="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --tiling) tiling="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    *) echo "compare_wan_vae.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "compare_wan_vae.sh: --rounds wants a positive integer, got '$rounds'" >&2; exit 2; }
bin="$root/build/bin/bench_wan_vae"
py="$root/tools/.venv/bin/python"
[[ -x "$bin" ]] || { echo "compare_wan_vae.sh: $bin missing: build it (cmake --build build --target bench_wan_vae)" >&2; exit 2; }
[[ -x "$py" ]] || { echo "compare_wan_vae.sh: $py missing: run tools/reference/setup_venv.sh" >&2; exit 2; }
tmp="$(mktemp)"
trap 'rm -f "$tmp"' EXIT
for ((r = 1; r <= rounds; r++)); do
  for dt in $dtypes; do
    for f in $frames; do
      args=(--dtype "$dt" --frames "$f" --height "$height" --width "$width" --repeat "$repeat" --warmup "$warmup"
            --threads "$threads" --tiling "$tiling")
      echo "[compare_wan_vae] round $r/$rounds: $dt, $f frames" >&2
      d="$("$bin" "${args[@]}")"
      p="$(OMP_NUM_THREADS="$threads" "$py" "$root/tools/bench/diffusers_wan_vae_bench.py" "${args[@]}")"
      printf '{"round": %d, "diffq": %s, "diffusers": %s}\n' "$r" "$d" "$p" >>"$tmp"
    done
  done
done
if [[ -n "$out" ]]; then
  mkdir -p "$(dirname "$out")"
  cp "$tmp" "$out.tmp" && mv "$out.tmp" "$out"
fi
"$py" "$root/tools/bench/wan_vae_table.py" "$tmp"
