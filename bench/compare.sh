#!/usr/bin/env bash
# diffq bench next to the Diffusers/PyTorch peer (tools/bench/diffusers_bench.py), same model, same
# combinations, same size/steps/threads, in one go; prints the side-by-side markdown table with ratios
# and keeps the raw JSON.
#   bench/compare.sh [--build build] [--out bench/results/flux-cpu.json] [--peer-repeat R] [--rounds N] \
#       -- <diffq bench args>
# e.g. bench/compare.sh --rounds 3 -- -m builtin:flux-small --combos "fp32; bf16" --steps 4 --size 512x512 --repeat 2 --threads 2
#      bench/compare.sh --rounds 3 -- -m builtin:wan-small --combos "fp32; bf16" --frames 17 --size 256x256 --steps 2 --threads 2
# (Wan: builtin:wan-* or a WanPipeline folder; the peer is tools/bench/diffusers_wan_bench.py through
# diffusers_bench.py; --size / --frames default to the model's on both sides.)
# Step caches (+fbc, +taylorseer, +magcache; +teacache is diffq only) go to the peer as Diffusers' enable_cache
# configs; --quality has the peer save each output too, and the table adds calls skipped, speed-up over the
# reference combination and PSNR / SSIM against it, per engine, e.g.
#      bench/compare.sh -- -m builtin:flux-small --combos "bf16; bf16+fbc:0.1; bf16+magcache" --size 256x256 --steps 8 --quality
# The peer needs tools/.venv (tools/reference/setup_venv.sh). --peer-repeat lowers the peer's repeat count
# (torch's CPU bf16 is slow); its warm-up stays.
# --rounds N (default 1) runs the whole diffq-then-peer sequence N times, alternating, and reports every
# round's ratios and their median: on a shared or throttling host the machine's speed drifts between
# minutes, and only ratios of runs made next to each other mean something. Each round starts with the
# host's FMA peak at the benchmark's thread count (build/bin/bench_fma_peak, when built) so a degraded
# round can be told apart.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$root/build" out="" peer_repeat="" rounds=1
while [[ $# -gt 0 && "$1" != "--" ]]; do
  case "$1" in
    --build) build="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --peer-repeat) peer_repeat="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    *) echo "compare.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[[ "${1:-}" == "--" ]] && shift
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "compare.sh: --rounds wants a positive integer, got '$rounds'" >&2; exit 2; }
py="$root/tools/.venv/bin/python"
[[ -x "$py" ]] || { echo "compare.sh: $py missing: run tools/reference/setup_venv.sh" >&2; exit 2; }
diffq="$build/bin/diffq"
[[ -x "$diffq" ]] || { echo "compare.sh: $diffq missing: build first (./scripts/setup.sh)" >&2; exit 2; }

# Pull the shared options out of the diffq arguments for the peer.
model="builtin:flux-small" combos="fp32; bf16" size="" frames="" steps=4 repeat=3 warmup=1 threads=0 quality=""
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  case "${args[$i]}" in
    -m|--model) model="${args[$((i + 1))]}" ;;
    --combos) combos="${args[$((i + 1))]}" ;;
    --size) size="${args[$((i + 1))]}" ;;
    --frames) frames="${args[$((i + 1))]}" ;;
    --steps) steps="${args[$((i + 1))]}" ;;
    --repeat) repeat="${args[$((i + 1))]}" ;;
    --warmup) warmup="${args[$((i + 1))]}" ;;
    --threads) threads="${args[$((i + 1))]}" ;;
    --quality) quality=1 ;;
  esac
done
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# The host's FMA peak (GFLOP/s) at the benchmark's thread count, or "-" when unknown.
fma_peak() {
  local fma="$build/bin/bench_fma_peak" t="$threads"
  [[ "$t" == 0 ]] && t="$(nproc)"
  [[ -x "$fma" ]] || { echo "-"; return; }
  "$fma" --benchmark_min_time=0.3 --benchmark_filter="BM_fma_peak/threads:$t/" --benchmark_format=json 2>/dev/null |
    "$py" -c 'import json,sys; b=json.load(sys.stdin)["benchmarks"]; print("%.0f" % b[0]["GFLOP/s"] if b else "-")' ||
    echo "-"
}

IFS=';' read -ra list <<< "$combos"
table_args=()
for ((r = 1; r <= rounds; r++)); do
  fma="$(fma_peak)"
  echo "[compare] round $r/$rounds (FMA peak $fma GFLOP/s): diffq bench $*" >&2
  "$diffq" bench "$@" --json > "$tmp/diffq$r.json"
  : > "$tmp/peer$r.jsonl"
  n=0
  for c in "${list[@]}"; do
    c="$(echo "$c" | xargs)"
    [[ -z "$c" ]] && continue
    n=$((n + 1))
    echo "[compare] round $r/$rounds: diffusers peer: $c" >&2
    "$py" "$root/tools/bench/diffusers_bench.py" -m "$model" --combo "$c" ${size:+--size "$size"} ${frames:+--frames "$frames"} --steps "$steps" \
      --repeat "${peer_repeat:-$repeat}" --warmup "$warmup" --threads "$threads" \
      ${quality:+--save-output "$tmp/peer$r-$n.npy"} 2>/dev/null | tail -n 1 >> "$tmp/peer$r.jsonl"
  done
  table_args+=(--round "$tmp/diffq$r.json" "$tmp/peer$r.jsonl" "$fma")
done
fma="$(fma_peak)"
"$py" "$root/tools/bench/bench_table.py" "${table_args[@]}" --fma-after "$fma" ${out:+--out "$out"} \
  --command "bench/compare.sh$([[ $rounds != 1 ]] && echo " --rounds $rounds")$([[ -n $peer_repeat ]] && echo " --peer-repeat $peer_repeat") -- $*"
