#!/usr/bin/env bash
# The one device check of the CUDA backend (issues 7, 35): one call on the lent H200 machine, at most 8
# minutes, at most 60 MB sent (the checkout plus one carried folder). Here, on a machine without a GPU, it
# packs what the device needs; there, it runs the parts below, each under its own timeout, each reporting
# its own status (ok / failed / timeout / skipped / unavailable), and writes under $OUT (at most 8 files
# come back from a device call): device-check.json, table.md, device-check.log and parts.tar.gz (every
# part's log and raw JSON, gtest's JSON included).
#
#   scripts/device-check.sh --pack DIR      here: relink build/'s diffq and test_cuda for the device (static
#                                           where it pays, FFmpeg and cpp-httplib stubbed, ICU's data cut:
#                                           tools/peers/relink_device.py, self-tested on this CPU), write
#                                           DIR/device-bin.tar.xz (+ the shared libraries left) and
#                                           DIR/python-site.tar.xz (Diffusers from the wheels of --wheels,
#                                           unpacked, xz), print the payload and the device command
#   scripts/device-check.sh --dry-run [--prebuilt DIR]
#                                           here: the payload (fails above 60 MB), then every part that needs
#                                           no GPU (test_cuda's host-side tests, the CPU half of the parity
#                                           runs); the GPU parts are recorded as skipped
#   scripts/device-check.sh --prebuilt DIR  on the device: the check itself, with DIR from --pack
# Options: --build DIR (default build: the binaries when there is no --prebuilt, and what --pack relinks),
#   --out DIR (default $OUT, else out/device-check), --budget SECONDS (default 470), --parts LIST (comma
#   list of: gpu_tests,parity,diffq_flux_step,diffq_flux_quant,diffq_flux_graphs,diffq_vae,diffq_wan_step,profile_flux,profile_wan,peer,
#   diffq_flux_28,torchao_int4),
#   --wheels DIR (default .whl: wheels for --pack's python-site, or pip-installed on the device when there is
#   no python-site.tar.xz), --int4-wheels DIR (default .whl-int4: torchao 0.18.0 + mslk-cuda 1.1.0, 48 MB:
#   a call of its own, `--parts torchao_int4`), --assume-gpu (run the GPU parts where nvidia-smi sees none).
#
# The parts, in this order (the budget keeps ~150 s for the Diffusers peer until it has run):
#   gpu_tests        test_cuda through tools/peers/run_gtest.py: per-test results from gtest's JSON; a crash
#                    or a hang names its test and the rest run again one suite per process; fails on any failure,
#                    crash or hang, and, where nvidia-smi sees a GPU, on a test skipped for "no CUDA device present"
#   parity           `diffq generate --device cuda` against `--device cpu` (same binary, same command) on
#                    tests/fixtures/tiny-flux (PNG + --output-latents; also with the transformer quantized
#                    --quant int8wo, int8dq, fp8dq, nf4, q4_0, int8 (LLM.int8): linear_q on CUDA; and with --compile regional
#                    --mode reduce-overhead: CUDA graphs) and tiny-wan (--output-type latent: no video writer in
#                    the device build), float32 and bfloat16; tools/peers/compare_outputs.py:
#                    max |gpu - cpu| / max |cpu| of the latents <= 1e-3 (float32), 5e-2 (bfloat16)
#   diffq_flux_step  diffq bench -m builtin:flux-dev-shape --device cuda --combos bf16 --size 1024x1024: a step
#   diffq_flux_quant the same step with the transformer quantized at load: bf16+nf4, bf16+int8wo (linear_q)
#   diffq_flux_graphs the same step with regional compile and CUDA graphs (bf16+regional+reduce-overhead)
#   diffq_vae        FLUX.1's VAE (random bf16 weights) decoding 1024x1024: diffq bench on the folder of
#                    tools/peers/make_vae_bench_folder.py (tiny transformer and encoders, 1 step)
#   diffq_wan_step   diffq bench -m builtin:wan-1.3b-shape --device cuda, 832x480, 81 frames: a CFG step
#   profile_flux, profile_wan  one step of each with DIFFQ_PROFILE_OPS=shapes: per-op device time
#   peer             Diffusers on the same GPU, same shapes (tools/peers/diffusers_device_peer.py)
#   diffq_flux_28    28 steps of builtin:flux-dev-shape, when the step's time says they fit in what is left
#   torchao_int4     tools/reference/check_torchao_int4_gpu.py, only with the int4 wheels (else skipped)
#   on request (--parts, a second call: issue 37's other figures):
#   diffq_flux_quant2  the FLUX-dev-shaped step with bf16+int8dq, bf16+fp8dq, bf16+q4_K
#   diffq_flux_offload the same step with bf16+group-offload and bf16+nf4+model-offload (peak device memory)
#   diffq_wan14        builtin:wan-14b-shape 832x480x81, a CFG step, bf16 and bf16+fp8dq
#   seeds            only on request (--parts seeds, a call of its own): the seeds' table at 1024x1024, 4
#                    steps: diffq bench bf16+nf4, + regional + reduce-overhead, + model-offload, and Diffusers'
#                    same three rows (seeds_peer: bitsandbytes nf4, compile_repeated_blocks, model CPU offload;
#                    needs bitsandbytes on the device: its wheel is too big to carry with the binaries)
# LD_LIBRARY_PATH (the unpacked lib/, /usr/local/cuda/lib64, torch's cuDNN) is set for diffq's and test_cuda's
# processes only, never for python; DIFFQ_SOURCE_DIR points the carried test_cuda at this checkout.
# Exit status: 1 when gpu_tests, parity or torchao_int4 failed (or timed out), or the payload is too big;
# the timings only report.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root" || exit 2
dry=0 assume_gpu=0 pack="" prebuilt="" build="$root/build" wheels="$root/.whl" int4_wheels="$root/.whl-int4"
out="${OUT:-$root/out/device-check}" budget=470 parts=""
all_parts="gpu_tests,parity,diffq_flux_step,diffq_flux_quant,diffq_flux_graphs,diffq_vae,diffq_wan_step,profile_flux,profile_wan,peer,diffq_flux_28,torchao_int4"
optional_parts="seeds,diffq_flux_quant2,diffq_flux_offload,diffq_wan14"  # only when --parts names them
limit_mb=60
usage() { sed -n '2,59p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --dry-run) dry=1; shift ;;
    --pack) pack="${2:?--pack needs a folder}"; shift 2 ;;
    --prebuilt) prebuilt="${2:?--prebuilt needs a folder}"; shift 2 ;;
    --build) build="${2:?--build needs a folder}"; shift 2 ;;
    --wheels) wheels="${2:?--wheels needs a folder}"; shift 2 ;;
    --int4-wheels) int4_wheels="${2:?--int4-wheels needs a folder}"; shift 2 ;;
    --out) out="${2:?--out needs a folder}"; shift 2 ;;
    --budget) budget="${2:?--budget needs seconds}"; shift 2 ;;
    --parts) parts="${2:?--parts needs a list}"; shift 2 ;;
    --assume-gpu) assume_gpu=1; shift ;;
    -h|--help) usage ;;
    *) echo "device-check: unknown argument '$1'" >&2; usage ;;
  esac
done
[[ "$budget" =~ ^[0-9]+$ ]] || { echo "device-check: --budget '$budget' is not a number of seconds" >&2; exit 2; }
parts="${parts:-$all_parts}"
for p in ${parts//,/ }; do
  [[ ",$all_parts,$optional_parts," == *",$p,"* ]] ||
    { echo "device-check: unknown part '$p' (parts: $all_parts; on request: $optional_parts)" >&2; exit 2; }
done
want() { [[ ",$parts," == *",$1,"* ]]; }
build="$(realpath -m "$build")" wheels="$(realpath -m "$wheels")" int4_wheels="$(realpath -m "$int4_wheels")"
start=$(date +%s)
say() { echo "[device-check] $*" >&2; }
mb() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1e6 }'; }
relpath() { realpath -m --relative-to="$root" "$1"; }

# ---- the payload: what a device call sends (the checkout's tracked and untracked-not-ignored files, plus
# the carried folder). The device tool's own limit is 64 MiB; the issue's is 60 MB.
checkout_bytes() {
  git -C "$root" ls-files -co --exclude-standard -z 2>/dev/null | (cd "$root" && xargs -0 stat -c %s 2>/dev/null) |
    awk '{ s += $1 } END { print s + 0 }'
}
payload_line() {  # $1: the carried folder
  local c y
  c=$(checkout_bytes)
  y=$( [[ -e "$1" ]] && du -sb "$1" | cut -f1 || echo 0)
  payload_total=$((c + y))
  echo "device run payload: $(mb $payload_total) MB (checkout $(mb "$c") MB + carried $(mb "$y") MB: $(relpath "$1"))"
}
device_command() {  # $1: the pack folder
  local d; d=$(relpath "$1")
  echo "run(command=\"scripts/device-check.sh --prebuilt $d\", carry=[\"$d\"], timeout_s=540)"
}

# ---- --pack: here, no GPU needed --------------------------------------------------------------------------
if [[ -n "$pack" ]]; then
  pack="$(realpath -m "$pack")"
  grep -q '^DIFFQ_CUDA:BOOL=ON' "$build/CMakeCache.txt" 2>/dev/null ||
    { say "--pack: $build is not a CUDA build (cmake -DDIFFQ_CUDA=ON, nvcc needed)"; exit 1; }
  say "building diffq and test_cuda in $build"
  lock=(); command -v flock > /dev/null && lock=(flock /tmp/diffq-build.lock)
  "${lock[@]}" cmake --build "$build" --target diffq test_cuda > /tmp/device-check-pack-build.log 2>&1 ||
    { tail -n 20 /tmp/device-check-pack-build.log >&2; say "--pack: the build failed"; exit 1; }
  stage="$(mktemp -d)"
  trap 'rm -rf "$stage"' EXIT
  python3 "$root/tools/peers/relink_device.py" --build "$build" --stage "$stage/bin-stage" || exit 1
  mkdir -p "$pack"
  rm -f "$pack"/device-bin.tar.xz "$pack"/python-site.tar.xz
  say "xz of the binaries (a minute or two)"
  tar -cf - -C "$stage/bin-stage" bin lib | xz -9 -T0 > "$pack/device-bin.tar.xz.tmp" &&
    mv "$pack/device-bin.tar.xz.tmp" "$pack/device-bin.tar.xz" || exit 1
  if ! compgen -G "$wheels/*.whl" > /dev/null; then
    ver=$(sed -nE 's/^diffusers==([0-9.]+).*/\1/p' "$root/tools/reference/requirements.txt")
    say "no wheel in $wheels: pip download diffusers${ver:+==$ver}"
    python3 -m pip download -q "diffusers${ver:+==$ver}" --no-deps --only-binary=:all: -d "$wheels" ||
      { say "--pack: pip download failed"; exit 1; }
  fi
  mkdir -p "$stage/site"
  python3 - "$stage/site" "$wheels"/*.whl <<'EOF' || exit 1
import sys, zipfile
for w in sys.argv[2:]:  # pure-Python wheels: unpacking one is installing it (PYTHONPATH on the device)
    zipfile.ZipFile(w).extractall(sys.argv[1])
    print(f"[device-check] python-site: {w.rsplit('/', 1)[-1]}", file=sys.stderr)
EOF
  tar -cf - -C "$stage/site" . | xz -9 -T0 > "$pack/python-site.tar.xz" || exit 1
  say "packed: $(relpath "$pack")/device-bin.tar.xz $(mb "$(stat -c %s "$pack/device-bin.tar.xz")") MB," \
      "python-site.tar.xz $(mb "$(stat -c %s "$pack/python-site.tar.xz")") MB"
  payload_line "$pack"
  ((payload_total > limit_mb * 1000000)) && { say "over ${limit_mb} MB: not sendable as it is"; exit 1; }
  echo "on the device: $(device_command "$pack")"
  exit 0
fi

# ---- the run (device, or --dry-run here) -----------------------------------------------------------------
mkdir -p "$out" || { echo "device-check: cannot create $out" >&2; exit 2; }
out="$(cd "$out" && pwd)"
rm -f "$out/device-check.json" "$out/table.md" "$out/parts.tar.gz"
exec > >(tee "$out/device-check.log") 2>&1
work="$(mktemp -d /tmp/diffq-device-check.XXXXXX)"
: > "$work/parts.jsonl"
carried="${prebuilt:-$root/.devbin}"
if git -C "$root" rev-parse --git-dir > /dev/null 2>&1; then
  payload_line "$(realpath -m "$carried")"
  if ((dry)) && ((payload_total > limit_mb * 1000000)); then
    say "the payload is over ${limit_mb} MB"; payload_over=1
  fi
fi
left() { echo $((budget - ($(date +%s) - start))); }
# Seconds for a part: its cap, within what is left of the budget less `reserve`.
slot() { local want=$1 reserve=$2 l; l=$(($(left) - reserve)); ((l < want)) && want=$l; ((want < 5)) && want=5; echo "$want"; }
json_str() { python3 -c 'import json,sys; print(json.dumps(sys.argv[1]))' "$1"; }
record() {  # part status seconds message
  printf '{"part": "%s", "status": "%s", "seconds": %s, "message": %s}\n' "$1" "$2" "${3:-null}" \
    "$(json_str "$4")" >> "$work/parts.jsonl"
  say "$1: $2${3:+ (${3}s)} $4"
  report
}
gpu_name=""
if command -v nvidia-smi > /dev/null 2>&1; then gpu_name=$(nvidia-smi -L 2>/dev/null | grep GPU | head -n 1); fi
gpu=0
if ((dry)); then say "dry run: the GPU parts are skipped"
elif [[ -n "$gpu_name" ]]; then gpu=1; say "GPU: $gpu_name"
elif ((assume_gpu)); then gpu=1; say "no GPU visible (nvidia-smi); --assume-gpu: running the GPU parts anyway"
else say "no GPU visible (nvidia-smi): the GPU parts are skipped"; fi

# The binaries: the --prebuilt pack, unpacked, else the build folder's.
bindir="" libdir="" bins_msg=""
untar_xz() {  # archive folder: tar's xz, else Python's (an image without xz-utils)
  mkdir -p "$2" && { tar -xJf "$1" -C "$2" 2>/dev/null ||
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$1" "$2"; }
}
if [[ -f "$carried/device-bin.tar.xz" ]]; then
  untar_xz "$carried/device-bin.tar.xz" "$work/dev" &&
    bindir="$work/dev/bin" libdir="$work/dev/lib" bins_msg="unpacked $(relpath "$carried")/device-bin.tar.xz"
elif [[ -n "$prebuilt" ]]; then
  bins_msg="$prebuilt has no device-bin.tar.xz (make it here: scripts/device-check.sh --pack $prebuilt)"
fi
if [[ -z "$bindir" && -x "$build/bin/test_cuda" && -x "$build/bin/diffq" ]]; then
  bindir="$build/bin" bins_msg="${bins_msg:+$bins_msg; }using $build/bin"
fi
bins_ok=0
[[ -n "$bindir" && -x "$bindir/test_cuda" && -x "$bindir/diffq" ]] && bins_ok=1
say "binaries: ${bins_msg:-none} "
# The library path of diffq's own processes (never python's): the unpacked libraries, the CUDA toolkit's
# (its RUNPATH's /usr/local/cuda/lib is absent there), torch's cuDNN (9.19; the system's 9.14 is the fallback).
# torch's other NVIDIA wheels (nvrtc, ...) come last: a fallback for a library the toolkit lacks.
cudnn_dir=$(ls -d /opt/torch/.venv/lib/python3*/site-packages/nvidia/cudnn/lib 2>/dev/null | head -n 1)
nv_dirs=$(ls -d /opt/torch/.venv/lib/python3*/site-packages/nvidia/*/lib 2>/dev/null | grep -v /cudnn/ | paste -sd: -)
dq_ld="${libdir:+$libdir:}${cudnn_dir:+$cudnn_dir:}/usr/local/cuda/lib64${nv_dirs:+:$nv_dirs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
dq() { env LD_LIBRARY_PATH="$dq_ld" DIFFQ_SOURCE_DIR="$root" "$@"; }
libs_missing=""
if ((bins_ok)); then
  libs_missing=$(dq ldd "$bindir/diffq" "$bindir/test_cuda" 2>&1 | grep "not found" | sort -u | tr -s ' \t\n' ' ')
  [[ -n "$libs_missing" ]] && say "libraries not found: $libs_missing"
  cudnn_used=$(dq ldd "$bindir/test_cuda" 2>/dev/null | sed -nE 's/.*libcudnn\.so\.[0-9]+ => (\S+).*/\1/p' | head -n 1)
fi
# Python: the packed Diffusers (python-site.tar.xz), else wheels pip-installed; PYTHONPATH for python alone.
site="" site_msg=""
prepare_site() {
  [[ -n "$site_msg" ]] && return
  if [[ -f "$carried/python-site.tar.xz" ]]; then
    untar_xz "$carried/python-site.tar.xz" "$work/site" && site="$work/site" &&
      site_msg="Diffusers from $(relpath "$carried")/python-site.tar.xz"
  elif compgen -G "$wheels/*.whl" > /dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$work/site" \
      "$wheels"/*.whl > "$work/pip.log" 2>&1 && site="$work/site" && site_msg="Diffusers from $(relpath "$wheels")"
  fi
  site_msg="${site_msg:-no python-site.tar.xz and no wheels: the Python packages of the image}"
}
py() { env ${site:+PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"} PYTHONUNBUFFERED=1 python3 "$@"; }

report() {
  local meta="$work/meta.json"
  python3 - "$meta" <<EOF
import json, sys
json.dump({"dry_run": $((dry)) == 1, "gpu_present": $((gpu)) == 1, "gpu": $(json_str "$gpu_name"),
           "started_utc": $(json_str "$(date -u -d "@$start" +%FT%TZ)"), "budget_s": $budget,
           "elapsed_s": $(($(date +%s) - start)), "binaries": $(json_str "$bins_msg"),
           "ld_library_path_of_diffq": $(json_str "$dq_ld"), "cudnn": $(json_str "${cudnn_used:-}"),
           "libraries_not_found": $(json_str "$libs_missing"), "python": $(json_str "$site_msg"),
           "commit": $(json_str "$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)")},
          open(sys.argv[1], "w"))
EOF
  python3 "$root/tools/peers/device_report.py" --work "$work" --out "$out" --meta "$meta" "$@"
}
# Runs a command under `timeout` into $work/<name>.log; sets rc, st (ok / failed / timeout), secs.
run_part() {
  local name=$1 limit=$2; shift 2
  say "$name (limit ${limit}s)"
  local t0; t0=$(date +%s)
  timeout --kill-after=5 "$limit" "$@" >> "$work/$name.log" 2>&1
  rc=$?
  secs=$(($(date +%s) - t0))
  if ((rc == 0)); then st=ok; elif ((rc == 124 || rc == 137)); then st=timeout; else st=failed; fi
}
# A diffq feature this build lacks says so: "unavailable", not "failed".
unavailable_in() { grep -m1 -iE "only cpu runs|no CUDA backend|not built with CUDA|unknown option|--device.*(not|unsupported)|The following argument was not expected" "$1"; }
reserve_peer=150
want peer && ((gpu)) || reserve_peer=0

# ---- 1. GPU tests -----------------------------------------------------------------------------------------
if ! want gpu_tests; then record gpu_tests skipped "" "not selected (--parts)"
elif ((!bins_ok)); then record gpu_tests unavailable "" "no test_cuda (${bins_msg:-no binaries})"
else
  lim=$(slot 120 "$reserve_peer")
  expect=(); ((gpu)) && [[ -n "$gpu_name" ]] && expect=(--expect-gpu)
  run_part gpu_tests "$((lim + 10))" python3 "$root/tools/peers/run_gtest.py" "$bindir/test_cuda" --work "$work/gtest" \
    --summary "$work/gpu_tests.json" --lib-path "$dq_ld" --env "DIFFQ_SOURCE_DIR=$root" --timeout "$lim" "${expect[@]}"
  msg=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("message", ""))' "$work/gpu_tests.json" 2>/dev/null)
  msg="${msg:-$(tail -n 2 "$work/gpu_tests.log")}"
  # The allocator tests once more with DIFFQ_CUDA_ALLOC=plain (one cudaMalloc per allocation): the
  # plain path and CudaPlainAllocator.* run only then.
  if [[ $st == ok ]]; then
    main_st=$st main_secs=$secs
    run_part gpu_tests_plain_alloc 60 python3 "$root/tools/peers/run_gtest.py" "$bindir/test_cuda" \
      --work "$work/gtest-plain" --summary "$work/gpu_tests_plain.json" --lib-path "$dq_ld" \
      --env "DIFFQ_SOURCE_DIR=$root" --env DIFFQ_CUDA_ALLOC=plain --timeout 50 "${expect[@]}" \
      --filter 'CudaPlainAllocator.*:CudaAllocator.*:CudaCachingAllocator.*'
    plain=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("message", ""))' "$work/gpu_tests_plain.json" 2>/dev/null)
    msg="$msg; DIFFQ_CUDA_ALLOC=plain: ${plain:-$(tail -n 2 "$work/gpu_tests_plain_alloc.log")}"
    [[ $st == ok ]] && st=$main_st
    secs=$((main_secs + secs))
  fi
  if ((gpu)); then record gpu_tests "$st" "$secs" "$msg${libs_missing:+; libraries not found: $libs_missing}"
  elif [[ $st == ok ]]; then record gpu_tests skipped "$secs" "no GPU; here: $msg"
  else record gpu_tests "$st" "$secs" "no GPU, and even so: $msg${libs_missing:+; libraries not found: $libs_missing}"; fi
fi

# ---- 2. parity: diffq generate --device cuda against --device cpu, tiny FLUX and Wan ------------------
parity_dir="$work/parity"
gen() {  # model dtype device -> $parity_dir/<model>-<dtype>-<device>.*
  local m=$1 dt=$2 dev=$3 base="$parity_dir/$1-$2-$3"
  local common=(-p "a red fox in the snow" --steps 4 --seed 7 --dtype "$dt" --device "$dev" --width 64 --height 64 --json)
  # flux_<scheme>: the transformer quantized with that --quant scheme (its linear_q CUDA kernel);
  # fluxgraphs: regional compile with mode reduce-overhead (each block a CUDA graph from its second step)
  local quant=(); [[ $m == flux_* ]] && quant=(--quant "${m#flux_}" --quantize transformer)
  [[ $m == fluxgraphs ]] && quant=(--compile regional --mode reduce-overhead)
  if [[ $m == flux* ]]; then
    dq "$bindir/diffq" generate -m "$root/tests/fixtures/tiny-flux" "${common[@]}" "${quant[@]}" -o "$base.png" \
      --output-latents "$base.safetensors" > "$base.json" 2> "$base.err"
  else
    dq "$bindir/diffq" generate -m "$root/tests/fixtures/tiny-wan" "${common[@]}" --frames 9 --output-type latent \
      -o "$base.safetensors" > "$base.json" 2> "$base.err"
  fi
}
if ! want parity; then record parity skipped "" "not selected (--parts)"
elif ((!bins_ok)); then record parity unavailable "" "no diffq (${bins_msg:-no binaries})"
else
  mkdir -p "$parity_dir"
  t0=$(date +%s) bad=() unav="" cpu_ok=0 hung=""
  plim=$(slot 150 "$reserve_peer")  # the whole part's; each run gets what is left of it, at most 60 s
  prun() {  # model dtype device: one generate under what is left of the part's time
    local l=$((plim - ($(date +%s) - t0))); ((l > 60)) && l=60
    ((l < 3)) && return 124
    timeout --kill-after=5 "$l" bash -c "$(declare -f gen dq); $(declare -p parity_dir root bindir dq_ld); gen $1 $2 $3"
  }
  prepare_site
  models=(flux fluxgraphs flux_int8wo flux_int8dq flux_fp8dq flux_nf4 flux_q4_0 flux_int8 wan)
  for m in "${models[@]}"; do
    for dt in float32 bfloat16; do
      prun "$m" "$dt" cpu; r=$?
      if ((r != 0)); then
        ((r == 124 || r == 137)) && hung="${hung:+$hung, }$m $dt cpu"
        ((r == 124 || r == 137)) || bad+=("$m $dt: the CPU run failed: $(tail -n 1 "$parity_dir/$m-$dt-cpu.err")")
        continue
      fi
      cpu_ok=$((cpu_ok + 1))
      ((gpu)) || continue
      if [[ -n "$hung" ]]; then continue; fi  # a hung CUDA run: the next would hang as well; keep the time
      prun "$m" "$dt" cuda; r=$?
      if ((r != 0)); then
        u=$(unavailable_in "$parity_dir/$m-$dt-cuda.err")
        if ((r == 124 || r == 137)); then hung="${hung:+$hung, }$m $dt cuda"
        elif [[ -n "$u" ]]; then unav="$u"
        else bad+=("$m $dt: the CUDA run failed: $(tail -n 1 "$parity_dir/$m-$dt-cuda.err")"); fi
        continue
      fi
      tol=1e-3; [[ $dt == bfloat16 ]] && tol=5e-2
      pngs=(); [[ $m == flux* ]] && pngs=(--png "$parity_dir/$m-$dt-cuda.png" "$parity_dir/$m-$dt-cpu.png")
      py "$root/tools/peers/compare_outputs.py" --name "$m-$dt" --tol "$tol" "$parity_dir/$m-$dt-cuda.safetensors" \
        "$parity_dir/$m-$dt-cpu.safetensors" "${pngs[@]}" >> "$work/parity.jsonl" 2>> "$work/parity.log" ||
        bad+=("$m $dt: $(tail -n 1 "$work/parity.jsonl" | cut -c1-300)")
    done
  done
  secs=$(($(date +%s) - t0))
  [[ -n "$hung" ]] && bad+=("no result within the part's ${plim}s from: $hung (later CUDA runs not started)")
  if ((!gpu)); then record parity skipped "$secs" "no GPU; here: $cpu_ok of $((2 * ${#models[@]})) CPU runs ok${bad:+; ${bad[*]}}"
  elif [[ -n "$hung" && ${#bad[@]} == 1 ]]; then record parity timeout "$secs" "${bad[*]}"
  elif ((${#bad[@]})); then record parity failed "$secs" "${bad[*]}"
  elif [[ -n "$unav" ]]; then record parity unavailable "$secs" "diffq generate --device cuda: $unav"
  else
    record parity ok "$secs" "$(python3 -c '
import json, sys
rs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print("; ".join("%s: max rel %.2e (tol %g)" % (r["name"], max(v.get("max_rel", 0) for v in r["latents"].values()), r["tol"])
                + (", png max diff %s" % r["png"]["max_diff"] if "png" in r and "max_diff" in r["png"] else "") for r in rs))
' "$work/parity.jsonl" 2>/dev/null)"
  fi
fi

# ---- 3-5. diffq bench on the GPU -----------------------------------------------------------------------
bench_part() {  # name cap json-file-stem bench-args...
  local name=$1 cap=$2; shift 2
  if ! want "$name"; then record "$name" skipped "" "not selected (--parts)"; return; fi
  if ((!gpu)); then record "$name" skipped "" "no GPU"; return; fi
  if ((!bins_ok)); then record "$name" unavailable "" "no diffq (${bins_msg:-no binaries})"; return; fi
  run_part "$name" "$(slot "$cap" "$reserve_peer")" bash -c "$(declare -f dq); $(declare -p dq_ld root); \
    dq \"\$@\" > '$work/$name.json'" _ "$bindir/diffq" bench --device cuda --json "$@"
  local m=""
  if [[ $st == ok ]]; then
    # (no backslashes inside f-string braces: the device's python3 may be older than 3.12)
    m=$(python3 -c 'import json,sys; rs=json.load(open(sys.argv[1]))
print("; ".join(("%s: " % r["combo"] if len(rs) > 1 else "") + "step median %.1f ms, latency median %.3f s, load %.1f s, "
      "peak device %.1f GiB" % (r["step_s"]["median"] * 1e3, r["latency_s"]["median"], r["load_s"],
      (r.get("peak_device_bytes") or 0) / 2**30) for r in rs))' \
      "$work/$name.json" 2>&1) || st=failed
  elif u=$(unavailable_in "$work/$name.log"); then st=unavailable m="$u"
  elif [[ $st == timeout ]]; then m="no result within ${secs}s; log: $(tail -n 1 "$work/$name.log" | cut -c1-200)"
  else m=$(tail -n 2 "$work/$name.log" | tr '\n' ' ')
  fi
  record "$name" "$st" "$secs" "$m"
}
bench_part diffq_flux_step 150 -m builtin:flux-dev-shape --combos bf16 --size 1024x1024 --steps 2 --repeat 1 --warmup 1
# The quantized linears on the GPU (issue 37): nf4 and int8 weight-only transformers, quantized at load.
bench_part diffq_flux_quant 150 -m builtin:flux-dev-shape --combos "bf16+nf4; bf16+int8wo" --size 1024x1024 --steps 2 \
  --repeat 1 --warmup 1
# CUDA graphs (issue 37): regional compile, mode reduce-overhead; the warm-up generation captures every block.
bench_part diffq_flux_graphs 120 -m builtin:flux-dev-shape --combos "bf16+regional+reduce-overhead" --size 1024x1024 \
  --steps 2 --repeat 1 --warmup 1
if want diffq_vae && ((gpu)) && ((bins_ok)); then
  prepare_site
  vae_dir=/tmp/diffq-vae-bench-folder  # 170 MB: outside $work, which goes back in parts.tar.gz
  if ! timeout 90 env ${site:+PYTHONPATH="$site"} python3 "$root/tools/peers/make_vae_bench_folder.py" "$vae_dir" \
      > "$work/diffq_vae_folder.log" 2>&1; then
    vst=failed; grep -q "ModuleNotFoundError" "$work/diffq_vae_folder.log" && vst=unavailable
    record diffq_vae "$vst" "" "tools/peers/make_vae_bench_folder.py: $(tail -n 1 "$work/diffq_vae_folder.log")"
  else
    bench_part diffq_vae 90 -m "$vae_dir" --combos bf16 --size 1024x1024 --steps 1 --repeat 2 --warmup 1
  fi
else
  bench_part diffq_vae 90
fi
bench_part diffq_wan_step 120 -m builtin:wan-1.3b-shape --combos bf16 --size 832x480 --frames 81 --steps 1 --repeat 1 --warmup 1

# ---- 5b. where a step's time goes: DIFFQ_PROFILE_OPS=shapes waits for the device after every op, so these
# runs are slower than the timed ones above; the table (op, dtype, input shapes, calls, ms, GFLOP/s) is
# in the part's log (parts.tar.gz), its first line in the report.
profile_part() {  # name cap bench-args...
  local name=$1 cap=$2; shift 2
  if ! want "$name"; then record "$name" skipped "" "not selected (--parts)"; return; fi
  if ((!gpu)); then record "$name" skipped "" "no GPU"; return; fi
  if ((!bins_ok)); then record "$name" unavailable "" "no diffq (${bins_msg:-no binaries})"; return; fi
  run_part "$name" "$(slot "$cap" "$reserve_peer")" env DIFFQ_PROFILE_OPS=shapes bash -c "$(declare -f dq); \
    $(declare -p dq_ld root); dq \"\$@\" > '$work/$name.json'" _ "$bindir/diffq" bench --device cuda --json "$@"
  record "$name" "$st" "$secs" "$(grep -m1 -A4 'op profile' "$work/$name.log" | tr '\n' ' ' | cut -c1-400)"
}
profile_part profile_flux 60 -m builtin:flux-dev-shape --combos bf16 --size 1024x1024 --steps 1 --repeat 1 --warmup 0
profile_part profile_wan 60 -m builtin:wan-1.3b-shape --combos bf16 --size 832x480 --frames 81 --steps 1 --repeat 1 --warmup 0

# ---- 6. the Diffusers peer -------------------------------------------------------------------------------
if ! want peer; then record peer skipped "" "not selected (--parts)"
elif ((!gpu)); then record peer skipped "" "no GPU"
else
  prepare_site
  reserve_after=0; want diffq_flux_28 && reserve_after=40
  lim=$(slot 240 "$reserve_after")
  run_part peer "$((lim + 15))" env ${site:+PYTHONPATH="$site"} PYTHONUNBUFFERED=1 python3 \
    "$root/tools/peers/diffusers_device_peer.py" --out "$work/peer.json" --budget "$lim"
  ((rc == 3)) && st=unavailable
  perr=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("error", ""))' "$work/peer.json" 2>/dev/null)
  record peer "$st" "$secs" "$site_msg; ${perr:+$perr; }$(grep '^\[peer\]' "$work/peer.log" | cut -c1-160 | tr '\n' ' ' | cut -c1-700)"
fi
reserve_peer=0

# ---- 7. 28 steps, when they fit ----------------------------------------------------------------------------
if want diffq_flux_28 && ((gpu)) && ((bins_ok)); then
  est=$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))[0]; print(int(r["load_s"] + 28 * r["step_s"]["median"] + 20))' \
    "$work/diffq_flux_step.json" 2>/dev/null)
  if [[ -z "$est" ]]; then record diffq_flux_28 skipped "" "no step time from diffq_flux_step to size it"
  elif ((est > $(left) - 15)); then record diffq_flux_28 skipped "" "28 steps need ~${est}s, $(left)s left"
  else bench_part diffq_flux_28 "$((est + 30))" -m builtin:flux-dev-shape --combos bf16 --size 1024x1024 --steps 28 --repeat 1 --warmup 0
  fi
else
  bench_part diffq_flux_28 60
fi

# ---- 8. torchao int4 against diffq (its own call: the wheels are 48 MB) ---------------------------------
if ! want torchao_int4; then record torchao_int4 skipped "" "not selected (--parts)"
elif ! compgen -G "$int4_wheels/*.whl" > /dev/null; then
  record torchao_int4 skipped "" "no wheels in $(relpath "$int4_wheels") (torchao==0.18.0, mslk-cuda==1.1.0: a call of its own, --parts torchao_int4)"
elif ((!gpu)); then record torchao_int4 skipped "" "no GPU"
else
  int4_cmd() {
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$work/site-int4" \
      "$int4_wheels"/*.whl || return 4
    PYTHONPATH="$work/site-int4" PYTHONUNBUFFERED=1 python3 "$root/tools/reference/check_torchao_int4_gpu.py" --out "$work/torchao_int4"
  }
  run_part torchao_int4 "$(slot 200 0)" bash -c "$(declare -f int4_cmd); $(declare -p work int4_wheels root); int4_cmd"
  ((rc == 3)) && st=unavailable
  m=$(grep '^\[torchao_int4\]' "$work/torchao_int4.log" | tail -n 1); ((rc == 4)) && m="pip could not install $int4_wheels"
  record torchao_int4 "$st" "$secs" "$m"
fi

# ---- 9. issue 37's other figures (on request: a second call) -------------------------------------------------
if want diffq_flux_quant2; then  # targets: fp8dq <= 80 ms, Q4_K <= 140 ms a step (int8dq: IMMA vs bf16)
  bench_part diffq_flux_quant2 240 -m builtin:flux-dev-shape --combos "bf16+int8dq; bf16+fp8dq; bf16+q4_K" \
    --size 1024x1024 --steps 2 --repeat 1 --warmup 1
fi
if want diffq_flux_offload; then  # target: group offload (block level, streams) <= 460 ms at <= 2 GiB
  bench_part diffq_flux_offload 200 -m builtin:flux-dev-shape --combos "bf16+group-offload; bf16+nf4+model-offload" \
    --size 1024x1024 --steps 2 --repeat 1 --warmup 1
fi
if want diffq_wan14; then  # targets: Wan-14B-shaped 480p step <= 2.6 s bf16, <= 1.9 s with fp8
  bench_part diffq_wan14 300 -m builtin:wan-14b-shape --combos "bf16; bf16+fp8dq" --size 832x480 --frames 81 \
    --steps 1 --repeat 1 --warmup 1
fi

# ---- 10. the seeds' table (on request: --parts seeds): diffq and Diffusers, the same three rows ---------------
if want seeds; then
  bench_part seeds 200 -m builtin:flux-dev-shape --size 1024x1024 --steps 4 --repeat 1 --warmup 1 --combos \
    "bf16+nf4; bf16+nf4+regional+reduce-overhead; bf16+nf4+regional+reduce-overhead+model-offload"
  if ((gpu)); then
    prepare_site
    lim=$(slot 200 0)
    run_part seeds_peer "$((lim + 15))" env ${site:+PYTHONPATH="$site"} PYTHONUNBUFFERED=1 python3 \
      "$root/tools/peers/diffusers_device_peer.py" --out "$work/seeds_peer.json" --parts flux_seeds --budget "$lim"
    ((rc == 3)) && st=unavailable
    record seeds_peer "$st" "$secs" "$(grep '^\[peer\]' "$work/seeds_peer.log" | cut -c1-700 | tr '\n' ' ')"
  else
    record seeds_peer skipped "" "no GPU"
  fi
fi

# ---- the report ---------------------------------------------------------------------------------------------
report --print
say "finished in $(($(date +%s) - start))s; results in $out"
tar -czf "$out/parts.tar.gz" -C "$work" --exclude='*.png' --exclude='dev' --exclude='site' --exclude='site-int4' . 2>/dev/null
status=0
for p in gpu_tests parity torchao_int4; do
  s=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["parts"][sys.argv[2]]["status"])' "$out/device-check.json" "$p" 2>/dev/null)
  [[ "$s" == failed || "$s" == timeout ]] && status=1
done
[[ -n "${payload_over:-}" ]] && status=1
((dry)) || rm -rf "$work"
((dry)) && say "work folder kept: $work"
if ((dry)); then echo "on the device: $(device_command "$(realpath -m "$carried")")"; fi
exit $status
