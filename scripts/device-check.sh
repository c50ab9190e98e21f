#!/usr/bin/env bash
# The one device check of the CUDA backend (issue 7), made to run in a single call on the lent GPU
# machine within 8 minutes: build (CUDA on, sm_90) -> the GPU tests -> `diffq bench --device cuda` on
# builtin:flux-dev-shape next to the Diffusers peer (one FLUX.1-dev-shaped transformer step, bf16,
# 1024x1024), in the same call -> torchao's real int4 weight-only forward (CUDA: mslk kernels) against
# diffq's int4wo output (tools/reference/check_torchao_int4_gpu.py; diffq's side is committed in
# tests/fixtures/quant/torchao/written/int4_gpu_diffq.safetensors). Prints a diffq vs Diffusers table and
# writes everything under $OUT (device-check.json, the logs, the raw JSON of both engines). Every part has
# its own timeout and reports its status ("ok", "failed", "timeout", "skipped", "unavailable") instead of
# pretending.
#
#   scripts/device-check.sh [--dry-run] [--build DIR] [--prebuilt DIR] [--pack DIR] [--wheels DIR] [--out DIR]
#                           [--budget SECONDS] [--jobs N] [--parts LIST] [--int4-wheels DIR]
#   --dry-run    the CPU-side parts only (arguments, the CUDA build, the JSON skeleton); the GPU
#                parts are recorded as skipped. Runs on a machine without a GPU.
#   --build      build folder (default build-device)
#   --prebuilt   a folder holding prebuilt.tgz (made by --pack) or bin/test_cuda, bin/diffq and lib/:
#                used when the build here fails or instead of it (the device image lacks diffq's
#                Debian packages; see docs/cuda.md)
#   --pack DIR   here, not on the device: build, then write DIR/prebuilt.tgz (bin/test_cuda, bin/diffq
#                and the shared libraries they need beyond glibc and CUDA) for --prebuilt, and stop
#   --assume-gpu run the GPU parts even where nvidia-smi sees no GPU (to exercise the script here: the
#                tests skip, diffq bench and the peer fail, and the outputs say so)
#   --wheels     folder of wheels for the peer (default .whl: Diffusers' pure-Python wheel; the image
#                has torch, transformers, accelerate and safetensors)
#   --out        results folder (default $OUT, else out/device-check)
#   --budget     total seconds (default 470: the device call's 8 minutes less a margin)
#   --parts      comma list of the parts to run (default all: build,gpu_tests,diffq_bench,peer,torchao_int4);
#                the others are recorded as skipped
#   --int4-wheels  wheels for torchao_int4 (default .whl-int4): torchao==0.18.0 (3.4 MB) and
#                mslk-cuda==1.1.0 (44.5 MB, the release for torch 2.11, the image's); without them the part
#                reports unavailable. With the tree (~18 MB) they leave no room for the Diffusers wheel
#                under a call's 64 MiB, so the int4 check is a call of its own.
# On the device: run(command="scripts/device-check.sh", carry=[".whl"], timeout_s=500), and
#   run(command="scripts/device-check.sh --parts torchao_int4", carry=[".whl-int4"], timeout_s=300).
# The int4 wheels, here: python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12
#   --implementation cp --platform manylinux_2_28_x86_64 -d .whl-int4 torchao==0.18.0 mslk-cuda==1.1.0
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dry=0 assume_gpu=0 pack="" build="$root/build-device" prebuilt="" wheels="$root/.whl" out="${OUT:-$root/out/device-check}"
budget=470 jobs="$(nproc 2>/dev/null || echo 4)"
all_parts="build,gpu_tests,diffq_bench,peer,torchao_int4" parts="" int4_wheels=""
usage() { sed -n '12,37p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --dry-run) dry=1; shift ;;
    --build) build="${2:?--build needs a folder}"; shift 2 ;;
    --assume-gpu) assume_gpu=1; shift ;;
    --pack) pack="${2:?--pack needs a folder}"; shift 2 ;;
    --prebuilt) prebuilt="${2:?--prebuilt needs a folder}"; shift 2 ;;
    --wheels) wheels="${2:?--wheels needs a folder}"; shift 2 ;;
    --out) out="${2:?--out needs a folder}"; shift 2 ;;
    --budget) budget="${2:?--budget needs seconds}"; shift 2 ;;
    --jobs) jobs="${2:?--jobs needs a number}"; shift 2 ;;
    --parts) parts="${2:?--parts needs a list}"; shift 2 ;;
    --int4-wheels) int4_wheels="${2:?--int4-wheels needs a folder}"; shift 2 ;;
    -h|--help) usage ;;
    *) echo "device-check: unknown argument '$1'" >&2; usage ;;
  esac
done
[[ "$budget" =~ ^[0-9]+$ ]] || { echo "device-check: --budget '$budget' is not a number of seconds" >&2; exit 2; }
[[ "$jobs" =~ ^[0-9]+$ && "$jobs" -gt 0 ]] || { echo "device-check: --jobs '$jobs' is not a positive number" >&2; exit 2; }
parts="${parts:-$all_parts}"
for p in ${parts//,/ }; do
  [[ ",$all_parts," == *",$p,"* ]] || { echo "device-check: unknown part '$p' (parts: $all_parts)" >&2; exit 2; }
done
want() { [[ ",$parts," == *",$1,"* ]]; }
int4_wheels="$(realpath -m "${int4_wheels:-$root/.whl-int4}")"
build="$(realpath -m "$build")"
[[ -n "$prebuilt" ]] && prebuilt="$(realpath -m "$prebuilt")"
[[ -n "$pack" ]] && pack="$(realpath -m "$pack")"
mkdir -p "$out" || { echo "device-check: cannot create $out" >&2; exit 2; }
out="$(cd "$out" && pwd)"
start=$(date +%s)
model="builtin:flux-dev-shape" size="1024x1024" combo="bf16"

left() { echo $((budget - ($(date +%s) - start))); }
# Seconds for a part: its own limit, capped by what is left of the budget less `reserve`.
slot() { local want=$1 reserve=$2 l; l=$(($(left) - reserve)); ((l < want)) && want=$l; ((want < 1)) && want=1; echo "$want"; }
json_str() { printf '"%s"' "$(printf '%s' "$1" | sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/\t/ /g' | tr -d '\r' | tr '\n' ' ')"; }
say() { echo "[device-check] $*" >&2; }
# Runs "$@" under `timeout`, output to $out/<name>.log; sets rc and st (ok / failed / timeout).
run_part() {
  local name=$1 secs=$2; shift 2
  say "$name (limit ${secs}s): $*"
  local t0=$(date +%s)
  if declare -F "$1" > /dev/null; then  # a function of this script: run it in a bash of its own
    timeout --kill-after=5 "$secs" bash -c "$(declare -p root build jobs wheels int4_wheels out launcher); $(declare -f "$1"); $1" \
      > "$out/$name.log" 2>&1
  else
    timeout --kill-after=5 "$secs" "$@" > "$out/$name.log" 2>&1
  fi
  rc=$?
  secs_used=$(($(date +%s) - t0))
  if ((rc == 0)); then st=ok; elif ((rc == 124 || rc == 137)); then st=timeout; else st=failed; fi
  say "$name: $st (rc $rc, ${secs_used}s)"
}
have_gpu() { command -v nvidia-smi > /dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q GPU; }

declare -A status seconds message
gpu=0
if ((dry)); then say "dry run: GPU parts skipped"; elif have_gpu || ((assume_gpu)); then gpu=1; else say "no GPU visible (nvidia-smi)"; fi

# ---- 1. build ---------------------------------------------------------------------------------
bindir="$build/bin"
export PATH="/usr/local/cuda/bin:$PATH"
launcher=()
command -v ccache > /dev/null 2>&1 && launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache
                                           -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
build_cmd() {
  cmake -S "$root" -B "$build" -G Ninja -DDIFFQ_CUDA=ON -DDIFFQ_BENCH=OFF \
    -DCMAKE_CUDA_ARCHITECTURES=90 "${launcher[@]}" && ninja -C "$build" -j "$jobs" test_cuda diffq
}
if want build; then
  run_part build "$(slot 270 150)" build_cmd
  status[build]=$st seconds[build]=$secs_used message[build]="$(tail -n 3 "$out/build.log")"
else
  st=skipped status[build]=skipped message[build]="not selected (--parts $parts)"
fi
if [[ "$st" != ok && -n "$prebuilt" && -f "$prebuilt/prebuilt.tgz" ]]; then
  mkdir -p /tmp/diffq-prebuilt && tar -xzf "$prebuilt/prebuilt.tgz" -C /tmp/diffq-prebuilt && prebuilt=/tmp/diffq-prebuilt
fi
if [[ "$st" != ok && -n "$prebuilt" ]]; then
  if [[ -x "$prebuilt/bin/test_cuda" && -x "$prebuilt/bin/diffq" ]]; then
    say "build $st: using the prebuilt binaries of $prebuilt"
    bindir="$(cd "$prebuilt/bin" && pwd)"
    [[ -d "$prebuilt/lib" ]] && export LD_LIBRARY_PATH="$(cd "$prebuilt/lib" && pwd)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    message[build]="build $st; used prebuilt $prebuilt"
  else
    message[build]="build $st and $prebuilt has no bin/test_cuda and bin/diffq"
  fi
fi
bins_ok=0
[[ -x "$bindir/test_cuda" && -x "$bindir/diffq" ]] && bins_ok=1
if [[ -n "$pack" ]]; then
  ((bins_ok)) || { say "--pack: the build failed (see $out/build.log)"; exit 1; }
  stage="$(mktemp -d)"
  mkdir -p "$stage/bin" "$stage/lib" "$pack" && cp "$bindir/test_cuda" "$bindir/diffq" "$stage/bin/" || exit 1
  ldd "$bindir/test_cuda" "$bindir/diffq" | awk '$3 ~ /^\// {print $3}' | sort -u |
    grep -vE '/(libc|libm|libdl|libpthread|librt|ld-linux[^/]*)\.so|/usr/local/cuda|libcuda\.so' |
    while read -r lib; do cp -L "$lib" "$stage/lib/"; done
  tar -czf "$pack/prebuilt.tgz.tmp" -C "$stage" bin lib && mv "$pack/prebuilt.tgz.tmp" "$pack/prebuilt.tgz"
  rm -rf "$stage"
  say "packed $(du -h "$pack/prebuilt.tgz" | cut -f1) into $pack/prebuilt.tgz (a device call carries at most 64 MiB)"
  exit 0
fi

# ---- 2. GPU tests -----------------------------------------------------------------------------
# The tests `ctest -L gpu` runs (all in test_cuda), in one process: several hundred ctest processes
# would each pay CUDA's start-up.
passed="" failed="" skipped=""
if ! want gpu_tests; then
  status[gpu_tests]=skipped message[gpu_tests]="not selected (--parts $parts)"
elif ((!gpu)); then
  status[gpu_tests]=skipped message[gpu_tests]="no GPU"
  # Still list the tests (needs no GPU): proves the binary starts and the table instantiates.
  if ((bins_ok)); then
    n=$("$bindir/test_cuda" --gtest_list_tests 2>/dev/null | grep -c '^  ')
    message[gpu_tests]="no GPU; test_cuda lists $n tests"
  fi
elif ((!bins_ok)); then
  status[gpu_tests]=skipped message[gpu_tests]="no test_cuda binary (build ${status[build]})"
else
  run_part gpu_tests "$(slot 120 150)" "$bindir/test_cuda" --gtest_output="json:$out/gpu_tests.json" \
    --gtest_brief=1
  status[gpu_tests]=$st seconds[gpu_tests]=$secs_used
  passed=$(sed -nE 's/^\[  PASSED  \] ([0-9]+) test.*/\1/p' "$out/gpu_tests.log" | tail -n 1)
  skipped=$(sed -nE 's/^\[  SKIPPED \] ([0-9]+) test.*/\1/p' "$out/gpu_tests.log" | tail -n 1)
  failed=$(sed -nE 's/^\[  FAILED  \] ([0-9]+) test.*/\1/p' "$out/gpu_tests.log" | tail -n 1)
  [[ -n "$passed$skipped" ]] && failed=${failed:-0}
  message[gpu_tests]="passed ${passed:-?}, failed ${failed:-?}, skipped ${skipped:-?}"
fi

# ---- 3. diffq bench --device cuda -------------------------------------------------------------
diffq_step=""
if ! want diffq_bench; then
  status[diffq_bench]=skipped message[diffq_bench]="not selected (--parts $parts)"
elif ((!gpu)); then
  status[diffq_bench]=skipped message[diffq_bench]="no GPU"
elif ((!bins_ok)); then
  status[diffq_bench]=skipped message[diffq_bench]="no diffq binary (build ${status[build]})"
else
  run_part diffq_bench "$(slot 90 130)" sh -c "'$bindir/diffq' bench -m $model --device cuda --combos $combo \
    --size $size --steps 2 --repeat 3 --warmup 1 --json > '$out/diffq_bench.json'"
  status[diffq_bench]=$st seconds[diffq_bench]=$secs_used
  if [[ "$st" == ok ]]; then
    diffq_step=$(tr -d ' \n' < "$out/diffq_bench.json" | sed -nE 's/.*"step_s":\{[^}]*"median":([0-9.eE+-]+).*/\1/p')
    message[diffq_bench]="step median ${diffq_step:-?} s"
  elif grep -q "only cpu runs" "$out/diffq_bench.log"; then
    status[diffq_bench]=unavailable
    message[diffq_bench]="diffq bench has no CUDA path yet: $(grep -m1 'only cpu' "$out/diffq_bench.log")"
  else
    message[diffq_bench]="$(tail -n 2 "$out/diffq_bench.log")"
  fi
fi
[[ "${status[diffq_bench]}" == unavailable ]] && say "NOTE: ${message[diffq_bench]}"

# ---- 4. the Diffusers peer ----------------------------------------------------------------------
peer_step=""
if ! want peer; then
  status[peer]=skipped message[peer]="not selected (--parts $parts)"
elif ((!gpu)); then
  status[peer]=skipped message[peer]="no GPU"
else
  peer_cmd() {
    if compgen -G "$wheels/*.whl" > /dev/null; then
      python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        "$wheels"/*.whl || return 3
      export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
    fi
    python3 "$root/tools/bench/diffusers_gpu_step.py" "$out/peer.json"
  }
  run_part peer "$(slot 180 10)" peer_cmd
  status[peer]=$st seconds[peer]=$secs_used
  if [[ "$st" == ok ]]; then
    peer_step=$(sed -nE 's/.*"step_s":\{[^}]*"median":([0-9.eE+-]+).*/\1/p' "$out/peer.json")
    message[peer]="step median ${peer_step:-?} s"
  else
    message[peer]="$(tail -n 2 "$out/peer.log")"
  fi
fi

# ---- 5. torchao int4 weight-only on the GPU against diffq -----------------------------------------
# tools/reference/check_torchao_int4_gpu.py: torchao's own Int4WeightOnlyConfig (mslk's quantizer and
# bf16i4bf16 kernel) on tests/fixtures/quant/torchao/int4_gpu/, against the port's quantization (bit for
# bit) and diffq's committed output (max rel <= 1e-2). rc 3 = torchao/mslk/CUDA unavailable.
int4_inputs="$root/tests/fixtures/quant/torchao/int4_gpu/inputs.safetensors"
int4_diffq="$root/tests/fixtures/quant/torchao/written/int4_gpu_diffq.safetensors"
if ! want torchao_int4; then
  status[torchao_int4]=skipped message[torchao_int4]="not selected (--parts $parts)"
elif [[ ! -f "$int4_inputs" || ! -f "$int4_diffq" ]]; then
  status[torchao_int4]=failed message[torchao_int4]="missing $int4_inputs or $int4_diffq"
elif ((!gpu)); then
  n_whl=$(compgen -G "$int4_wheels/*.whl" | wc -l)
  status[torchao_int4]=skipped message[torchao_int4]="no GPU; inputs and diffq output present, $n_whl wheel(s) in $int4_wheels"
else
  int4_cmd() {
    if compgen -G "$int4_wheels/*.whl" > /dev/null; then
      python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site-int4 \
        "$int4_wheels"/*.whl || return 4
      export PYTHONPATH=/tmp/site-int4${PYTHONPATH:+:$PYTHONPATH}
    fi
    PYTHONUNBUFFERED=1 python3 "$root/tools/reference/check_torchao_int4_gpu.py" --out "$out"
  }
  run_part torchao_int4 "$(slot 150 0)" int4_cmd
  status[torchao_int4]=$st seconds[torchao_int4]=$secs_used
  ((rc == 3)) && status[torchao_int4]=unavailable
  if ((rc == 4)); then
    message[torchao_int4]="pip could not install the wheels of $int4_wheels"
  else
    message[torchao_int4]="$(grep '^\[torchao_int4\]' "$out/torchao_int4.log" | tail -n 1)"
  fi
fi

# ---- 6. table and JSON --------------------------------------------------------------------------
ms() { [[ -n "$1" ]] && awk -v s="$1" 'BEGIN { printf "%.1f", s * 1000 }' || echo "-"; }
ratio="-"
[[ -n "$diffq_step" && -n "$peer_step" ]] && ratio=$(awk -v a="$diffq_step" -v b="$peer_step" 'BEGIN { printf "%.2f", b / a }')
d_cell=$(ms "$diffq_step") p_cell=$(ms "$peer_step")
[[ -z "$diffq_step" ]] && d_cell="${status[diffq_bench]}"
[[ -z "$peer_step" ]] && p_cell="${status[peer]}"
{
  echo
  echo "| $model $combo $size, one step | diffq | Diffusers | Diffusers/diffq |"
  echo "|---|---|---|---|"
  echo "| step ms (median) | $d_cell | $p_cell | $ratio |"
  echo
  for p in build gpu_tests diffq_bench peer torchao_int4; do echo "- $p: ${status[$p]} ${seconds[$p]:+(${seconds[$p]}s)} ${message[$p]:-}"; done
} | tee "$out/table.md"

{
  echo "{"
  echo "  \"dry_run\": $([[ $dry == 1 ]] && echo true || echo false),"
  echo "  \"gpu_present\": $([[ $gpu == 1 ]] && echo true || echo false),"
  echo "  \"started_utc\": $(json_str "$(date -u -d "@$start" +%FT%TZ 2>/dev/null || date -u +%FT%TZ)"),"
  echo "  \"budget_s\": $budget, \"elapsed_s\": $(($(date +%s) - start)),"
  echo "  \"model\": $(json_str "$model"), \"combo\": $(json_str "$combo"), \"size\": $(json_str "$size"),"
  echo "  \"parts\": {"
  sep=""
  for p in build gpu_tests diffq_bench peer torchao_int4; do
    printf '%s    "%s": {"status": %s, "seconds": %s, "message": %s}' "$sep" "$p" "$(json_str "${status[$p]}")" \
      "${seconds[$p]:-null}" "$(json_str "${message[$p]:-}")"
    sep=$',\n'
  done
  echo
  echo "  },"
  echo "  \"gpu_tests\": {\"passed\": ${passed:-null}, \"failed\": ${failed:-null}, \"skipped\": ${skipped:-null}},"
  echo "  \"diffq_step_s\": ${diffq_step:-null}, \"diffusers_step_s\": ${peer_step:-null},"
  echo "  \"diffusers_over_diffq\": $([[ $ratio == - ]] && echo null || echo "$ratio")"
  echo "}"
} > "$out/device-check.json.tmp" && mv "$out/device-check.json.tmp" "$out/device-check.json"
say "wrote $out/device-check.json ($(($(date +%s) - start))s)"
[[ "${status[build]}" == ok || "${status[build]}" == skipped || -n "$prebuilt" ]] || exit 1
[[ "${status[gpu_tests]}" == failed ]] && exit 1
[[ "${status[torchao_int4]}" == failed ]] && exit 1
exit 0
