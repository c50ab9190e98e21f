#!/usr/bin/env bash
# Runs the test suite through ctest.
#   ./scripts/test.sh              # the Release build in build/ (run scripts/setup.sh first)
#   ./scripts/test.sh --sanitize   # AddressSanitizer + UBSan build (clang) in build-asan/, every test
#   ./scripts/test.sh --fuzz [s]   # libFuzzer targets (clang) in build-fuzz/, s seconds each (default 60)
#   ./scripts/test.sh --ci-sanitize [s]  # what CI adds (same build-asan/): the parsers' and I/O
#                                  # tests and the SIMD kernel suites under ASan + UBSan, and each fuzz
#                                  # target s seconds (default 10)
# Every test runs: those that need a GPU skip with their reason where none is present; the kernel
# suites also run once per lower SIMD target (names ending @AVX2, @SCALAR or @EMU128; tests/CMakeLists.txt).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
jobs=$(nproc)

# --sanitize and --ci-sanitize share one build: clang, -O1 -g, ASan + UBSan, the fuzz targets too (so
# CI's subset and the whole sanitizer suite reuse each other's objects).
sanitize_configure() {
  CC=clang CXX=clang++ cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" -DDIFFQ_SANITIZE=ON -DDIFFQ_FUZZ=ON -DDIFFQ_CUDA=OFF \
    -DDIFFQ_BENCH=OFF -DDIFFQ_TESTS=ON
}

case "${1:-}" in
  --sanitize)
    sanitize_configure
    cmake --build build-asan
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
      ctest --test-dir build-asan --output-on-failure -j "$jobs"
    ;;
  --ci-sanitize)
    # One clang build with the sanitizers and the fuzz targets: the parsers' and I/O tests (safetensors,
    # GGUF, JSON configs, PNG, tokenizers, Diffusers folders, video files, prompt cleaning) run under ASan + UBSan, then each fuzz
    # target briefly on its seed corpus, so `--fuzz` keeps building and a leak or UB in a parser fails CI.
    secs=${2:-10}
    sanitize_configure
    cmake --build build-asan --target test_io test_pipelines test_ops test_quant test_serve diffq fuzz_targets
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
      ctest --test-dir build-asan --output-on-failure -j "$jobs" \
        -R '^(Safetensors[A-Za-z]*|Malformed[A-Za-z]*|GGUF|MappedFile|DiffusersFolder|Inspect|JsonConfig|Png|Tokenizers|Video[A-Za-z]*|PromptClean|UMT5Tokenizer)\.'
    # The hand-written SIMD kernels (GEMMs, packed weights, attention tiles, convolution and its bands and
    # transposes, group / channel norm (+ silu), the quantized tile driver, mul_add's broadcast rows, bf16 binary
    # rows, the unary activations (GELU's reciprocal estimate, the bf16 tables and their gathers) and the linears that
    # apply them, the int8 GEMM's AMX tiles, epilogues and activation quantization, upsample; the channels-last conv bands,
    # group norm and upsampling) on this CPU's paths: out-of-bounds packs and loads show up here.
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
      ctest --test-dir build-asan --output-on-failure -j "$jobs" \
        -R '^(Bf16Dot[A-Za-z]*|[A-Za-z]+/Bf16DotThroughGemm|[A-Za-z]+/SdpaBf16|SdpaBf16Choice|SdpaKernel|[A-Za-z]+/SdpaKernel|SgemmKernel[A-Za-z]*|[A-Za-z]+/BlockedThroughGemm|[A-Za-z]+/OnednnGemm|OnednnGemmChoice|PackedBf16Weight|[A-Za-z]+/SdpaOnednn|SdpaOnednn|[A-Za-z]+/SdpaAmx|DequantTileLinear|MulAdd|Transpose2d|BinaryBf16|UnaryBf16|UnaryGeluTanh|LinearQAct|Int8Kernels|Int8Amx|AmxBf16|GroupNormSilu|ChannelNormSilu|ChannelNorm|ChannelsLast[A-Za-z]*|OnednnConvAdd|[A-Za-z]+/OnednnConv|Table/CpuOps\.MatchesReference/(conv2d|group_norm|channel_norm|upsample|linear|matmul|sdpa|mul_add|unary[0-9]+)_)'

    # The server (its API, jobs, cancel/drain, LoRA requests: threads, sockets, long-lived state, where a
    # reference cycle or a use after free hides) and the pipelines placed on the fake device.
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
      ctest --test-dir build-asan --output-on-failure -j "$jobs" \
        -R '^(Serve(Api|Jobs|Lora|Cli|Utf8|Redis)|Redis(Url|JobSpec|Routing|WorkerBeat)|PipelinePlacement|Pipelines/PlacementVariants|LinearQOp|Modes/DeviceOffloadSchedule)\.'

    for f in build-asan/bin/fuzz_*; do
      name=$(basename "$f" | sed 's/^fuzz_//')
      dict=()
      [ -f "tests/fuzz/$name.dict" ] && dict=(-dict="tests/fuzz/$name.dict")
      work=$(mktemp -d)
      echo "fuzz: $f for ${secs}s (seed corpus tests/fuzz/corpus/$name)"
      if ! "$f" -max_total_time="$secs" -rss_limit_mb=2048 -artifact_prefix=build-asan/ "${dict[@]}" \
          "$work" "tests/fuzz/corpus/$name" > "$work.log" 2>&1; then
        tail -n 40 "$work.log" >&2
        echo "fuzz: fuzz_$name failed (reproducer in build-asan/crash-*, leak-* or timeout-*)" >&2
        exit 1
      fi
      tail -n 1 "$work.log"
      rm -f "$work.log"
      rm -rf "$work"
    done
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
    ctest --test-dir build --output-on-failure -j "$jobs"
    ;;
  *)
    echo "usage: $0 [--sanitize | --fuzz [seconds] | --ci-sanitize [seconds]]" >&2
    exit 2
    ;;
esac
