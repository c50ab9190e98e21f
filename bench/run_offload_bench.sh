#!/usr/bin/env bash
# Group offloading from disk on the CPU (docs/offload.md): every bench_offload mode, bf16 and int4, in
# two interleaved rounds, bracketed by the FMA peak check (the VM's 2 vCPUs are not always 2 cores).
# Builds nothing: expects build/bin/bench_offload and build-bench/bin/bench_fma_peak (or BENCH_BUILD).
# Usage: bench/run_offload_bench.sh [BUILD_DIR] [--drop-cache]
#   --drop-cache: no offloading (reference) and the disk modes, bf16 and int4, with the group files dropped from the page cache
#   after every read (GroupOffloadOptions::drop_page_cache: each step reads the model from the disk).
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build="build"
drop=0
for arg in "$@"; do
  case "$arg" in
    --drop-cache) drop=1 ;;
    *) build="$arg" ;;
  esac
done
modes=("none" "disk" "disk-sync" "none --quant int4" "disk --quant int4" "disk-sync --quant int4")
(( drop )) && modes=("none" "disk --drop-cache 1" "disk --quant int4 --drop-cache 1" "disk-sync --drop-cache 1"
                     "disk-sync --quant int4 --drop-cache 1")
fma() { "${BENCH_BUILD:-$build}/bin/bench_fma_peak" --benchmark_min_time=0.3 2>&1 |
          grep -o "threads:2.*GFLOP/s=[0-9.]*" | sed "s/process_time.*GFLOP/ GFLOP/"; }
echo "fma before: $(fma)"
for round in 1 2; do
  for m in "${modes[@]}"; do
    # shellcheck disable=SC2086
    echo "round $round $m: $("$build/bin/bench_offload" $m --steps 4 --res 256 2>&1 | tail -1)"
  done
done
echo "fma after: $(fma)"
