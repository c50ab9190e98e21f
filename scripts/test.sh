#!/usr/bin/env bash
# Runs the test suite through ctest.
#   ./scripts/test.sh              # the Release build in build/ (run scripts/setup.sh first)
#   ./scripts/test.sh --sanitize   # AddressSanitizer + UBSan build in build-asan/, all CPU tests
#   ./scripts/test.sh --fuzz [s]   # libFuzzer targets (clang) in build-fuzz/, s seconds each (default 60)
# Tests labelled `gpu` run only where nvidia-smi sees a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
jobs=$(nproc)

label_args=(-LE gpu)
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q GPU; then
  label_args=()
fi

case "${1:-}" in
  --sanitize)
    cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDIFFQ_SANITIZE=ON \
      -DDIFFQ_CUDA=OFF -DDIFFQ_BENCH=OFF
    cmake --build build-asan
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
      ctest --test-dir build-asan --output-on-failure -j "$jobs" -LE gpu
    ;;
  --fuzz)
    secs=${2:-60}
    CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DDIFFQ_FUZZ=ON -DDIFFQ_CUDA=OFF -DDIFFQ_BENCH=OFF -DDIFFQ_TESTS=ON
    cmake --build build-fuzz --target fuzz_targets
    for f in build-fuzz/bin/fuzz_*; do
      name=$(basename "$f" | sed 's/^fuzz_//')
      corpus=tests/fuzz/corpus/$name
      dict=()
      [ -f "tests/fuzz/$name.dict" ] && dict=(-dict="tests/fuzz/$name.dict")
      work=$(mktemp -d)
      echo "fuzz: $f for ${secs}s (seed corpus $corpus)"
      # Crash reproducers land in build-fuzz/ (crash-*, leak-*, timeout-*); set -e stops at the first.
      "$f" -max_total_time="$secs" -rss_limit_mb=2048 -artifact_prefix=build-fuzz/ "${dict[@]}" \
        "$work" "$corpus"
      rm -rf "$work"
    done
    ;;
  "")
    [ -d build ] || { echo "test: no build/ — run ./scripts/setup.sh first" >&2; exit 1; }
    cmake --build build
    ctest --test-dir build --output-on-failure -j "$jobs" "${label_args[@]}"
    ;;
  *)
    echo "usage: $0 [--sanitize | --fuzz [seconds]]" >&2
    exit 2
    ;;
esac
