#!/usr/bin/env bash
# Installs the Debian packages of scripts/debian-packages.txt (idempotent; run as root or with sudo),
# then configures and builds Release into build/.
#   ./scripts/setup.sh               # install + build
#   SKIP_APT=1 ./scripts/setup.sh    # build only
#   DIFFQ_SETUP_TARGET=diffq_deps_check ./scripts/setup.sh   # configure, then build only these
#                                    # targets (space-separated) instead of everything
#   DIFFQ_ONEDNN=3.2 ./scripts/setup.sh   # oneDNN 3.2 from pinned PyPI wheels into .deps/ (scripts/onednn.sh),
#                                    # which the build then prefers to Debian's 2.6 (default on AMX CPUs)
#   DIFFQ_ONEDNN=2.6 ./scripts/setup.sh   # Debian's oneDNN 2.6 even where 3.2 is installed or preferred
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${SKIP_APT:-0}" != "1" ]; then
  mapfile -t pkgs < <(grep -v -E '^\s*(#|$)' scripts/debian-packages.txt)
  missing=()
  for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    SUDO=""
    [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    echo "setup: installing ${missing[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
  fi
fi

# The CUDA backend builds wherever nvcc exists (it is on PATH or in /usr/local/cuda).
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
# A CUDA build uses cuDNN's fused attention and convolution through the cuDNN frontend's headers
# (installed into .deps/ by scripts/cudnn-frontend.sh; without them CMake builds the simple kernels only).
if command -v nvcc >/dev/null 2>&1; then
  ./scripts/cudnn-frontend.sh
fi

# oneDNN: Debian's 2.6, or 3.2 from its pinned PyPI wheels in .deps/onednn-3.2.0 (scripts/onednn.sh), which
# CMake then prefers. Default (DIFFQ_ONEDNN unset or auto): 3.2 where the CPU has AMX (its AMX brgemm is
# 4-29% faster per FLUX / Wan step there), 2.6 elsewhere (3.2 no faster on AVX512-BF16 or AVX2):
# docs/benchmarks.md "oneDNN 3.2 vs 2.6". Where the automatic choice cannot install 3.2 (offline, no
# pip), setup says so and builds on 2.6 (the same results, slower on AMX); DIFFQ_ONEDNN=3.2 fails instead.
onednn_args=()
case "${DIFFQ_ONEDNN:-auto}" in
  3.2) ./scripts/onednn.sh ;;
  2.6) onednn_args=(-DDIFFQ_ONEDNN_PREFIX=system) ;;
  auto)
    if grep -qw amx_bf16 /proc/cpuinfo 2>/dev/null; then
      if ! ./scripts/onednn.sh; then
        echo "setup: WARNING: this CPU has AMX but oneDNN 3.2 could not be installed (above): building on" \
             "Debian's oneDNN 2.6, which runs AMX GEMMs slower (DIFFQ_ONEDNN=2.6 silences this)" >&2
        onednn_args=(-DDIFFQ_ONEDNN_PREFIX=system)
      fi
    fi ;;
  *)
    echo "setup: DIFFQ_ONEDNN='${DIFFQ_ONEDNN}' is not one of auto, 3.2, 2.6" >&2
    exit 1 ;;
esac

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "${onednn_args[@]}" ${DIFFQ_CMAKE_ARGS:-}
if [ -n "${DIFFQ_SETUP_TARGET:-}" ]; then
  read -r -a targets <<<"$DIFFQ_SETUP_TARGET"
  cmake --build build --target "${targets[@]}"
  echo "setup: built ${targets[*]}"
else
  cmake --build build
  echo "setup: built build/bin/diffq"
fi
