#!/usr/bin/env bash
# diffq bench next to the Diffusers/PyTorch peer (tools/bench/diffusers_bench.py), same model, same
# combinations, same size/steps/threads, in one go; prints the side-by-side markdown table with ratios
# and keeps the raw JSON.
#   bench/compare.sh [--build build] [--out bench/results/flux-cpu.json] [--peer-repeat R] -- <diffq bench args>
# e.g. bench/compare.sh -- -m builtin:flux-small --combos "fp32; bf16" --steps 4 --size 512x512 --repeat 3 --threads 2
# The peer needs tools/.venv (tools/reference/setup_venv.sh). --peer-repeat lowers the peer's repeat count
# (torch's CPU bf16 is slow); its warm-up stays.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$root/build" out="" peer_repeat=""
while [[ $# -gt 0 && "$1" != "--" ]]; do
  case "$1" in
    --build) build="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --peer-repeat) peer_repeat="$2"; shift 2 ;;
    *) echo "compare.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[[ "${1:-}" == "--" ]] && shift
py="$root/tools/.venv/bin/python"
[[ -x "$py" ]] || { echo "compare.sh: $py missing: run tools/reference/setup_venv.sh" >&2; exit 2; }
diffq="$build/bin/diffq"
[[ -x "$diffq" ]] || { echo "compare.sh: $diffq missing: build first (./scripts/setup.sh)" >&2; exit 2; }

# Pull the shared options out of the diffq arguments for the peer.
model="builtin:flux-small" combos="fp32; bf16" size="512x512" steps=4 repeat=3 warmup=1 threads=0
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  case "${args[$i]}" in
    -m|--model) model="${args[$((i + 1))]}" ;;
    --combos) combos="${args[$((i + 1))]}" ;;
    --size) size="${args[$((i + 1))]}" ;;
    --steps) steps="${args[$((i + 1))]}" ;;
    --repeat) repeat="${args[$((i + 1))]}" ;;
    --warmup) warmup="${args[$((i + 1))]}" ;;
    --threads) threads="${args[$((i + 1))]}" ;;
  esac
done
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

echo "[compare] diffq bench $*" >&2
"$diffq" bench "$@" --json > "$tmp/diffq.json"
IFS=';' read -ra list <<< "$combos"
: > "$tmp/peer.jsonl"
for c in "${list[@]}"; do
  c="$(echo "$c" | xargs)"
  [[ -z "$c" ]] && continue
  echo "[compare] diffusers peer: $c" >&2
  "$py" "$root/tools/bench/diffusers_bench.py" -m "$model" --combo "$c" --size "$size" --steps "$steps" \
    --repeat "${peer_repeat:-$repeat}" --warmup "$warmup" --threads "$threads" 2>/dev/null | tail -n 1 >> "$tmp/peer.jsonl"
done
"$py" "$root/tools/bench/bench_table.py" "$tmp/diffq.json" "$tmp/peer.jsonl" ${out:+--out "$out"} \
  --command "bench/compare.sh -- $*"
