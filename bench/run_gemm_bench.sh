#!/usr/bin/env bash
# CPU GEMM benchmark: diffq's gemm.h entry points vs torch.matmul, same shapes/threads, same run.
# Builds nothing: expects the binaries in BUILD_DIR (default build/):
#   cmake -S . -B build -G Ninja -DDIFFQ_CUDA=OFF && ninja -C build bench_fma_peak bench_gemm_diffq
#   (for --candidates also: ninja -C build bench_gemm_candidates)
# Usage: bench/run_gemm_bench.sh [BUILD_DIR] [--candidates]
# Env: GEMM_BENCH_THREADS (default 1,2), GEMM_BENCH_REPS (default 7), GEMM_BENCH_OUT (JSON kept there).
# Every figure is the best of the repetitions (see tools/bench/gemm_table.py), for diffq and torch alike.
# Prints Markdown: the measured FP32 peak, diffq vs torch.matmul (f32 and bf16), and with --candidates
# the table of candidate libraries (OpenBLAS, BLIS, oneDNN, diffq).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="build"
candidates=0
for arg in "$@"; do
  case "$arg" in
    --candidates) candidates=1 ;;
    *) build="$arg" ;;
  esac
done
bin="$build/bin"
threads="${GEMM_BENCH_THREADS:-1,2}"
reps="${GEMM_BENCH_REPS:-7}"
out="${GEMM_BENCH_OUT:-$(mktemp -d)}"
mkdir -p "$out"
py="$here/tools/.venv/bin/python"
table="python3 $here/tools/bench/gemm_table.py"
export GEMM_BENCH_THREADS="$threads"
gb=(--benchmark_repetitions="$reps" --benchmark_min_time=0.1 --benchmark_format=json
    --benchmark_report_aggregates_only=false)

for b in bench_fma_peak bench_gemm_diffq; do
  [[ -x "$bin/$b" ]] || { echo "missing $bin/$b (build it first, see the header of $0)" >&2; exit 1; }
done

echo "# CPU GEMM benchmark"
echo
echo "- date: $(date -u +%FT%TZ), host: $(uname -n), cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs), $(nproc) cpus"
echo "- load average before: $(cut -d' ' -f1-3 /proc/loadavg); threads: $threads; repetitions: $reps (best of)"
echo "- JSON: $out"
echo

"$bin/bench_fma_peak" --benchmark_repetitions="$reps" --benchmark_format=json >"$out/peak.json" 2>/dev/null
echo "## Measured FP32 peak (bench_fma_peak)"
echo
$table peak "$out/peak.json"
echo

# diffq and torch back to back, so that both see the same machine state.
"$bin/bench_gemm_diffq" "${gb[@]}" >"$out/diffq.json" 2>/dev/null
"$py" "$here/tools/bench/torch_gemm.py" --threads "$threads" --reps "$reps" --min-time 0.1 >"$out/torch.json"
echo "## diffq (src/backend/cpu/gemm.h) vs torch.matmul"
echo
echo "C = A[M,K] @ B[N,K]^T, row-major. bf16: bf16 inputs, f32 accumulation (diffq returns f32, torch bf16)."
echo
$table compare "$out/peak.json" "$out/diffq.json" "$out/torch.json"
echo

if (( candidates )); then
  libs=("$out/diffq.json")
  for b in bench_gemm_openblas bench_gemm_blis bench_gemm_onednn; do
    if [[ -x "$bin/$b" ]]; then
      "$bin/$b" "${gb[@]}" >"$out/$b.json" 2>/dev/null
      libs+=("$out/$b.json")
    else
      echo "(skipped $b: not built)"
    fi
  done
  echo "## Candidate libraries"
  echo
  $table candidates "$out/peak.json" "${libs[@]}"
  echo
fi
echo "- load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
