#!/usr/bin/env bash
# Installs the Debian packages of scripts/debian-packages.txt (idempotent; run as root or with sudo),
# then configures and builds Release into build/.
#   ./scripts/setup.sh               # install + build
#   SKIP_APT=1 ./scripts/setup.sh    # build only
#   DIFFQ_SETUP_TARGET=diffq_deps_check ./scripts/setup.sh   # configure, then build only these
#                                    # targets (space-separated) instead of everything
#   DIFFQ_ONEDNN=3.2 ./scripts/setup.sh   # also install oneDNN 3.2 into .deps/ (scripts/onednn.sh),
#                                    # which the build then prefers to Debian's 2.6
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

# oneDNN 3.2 from its pinned PyPI wheels, on request (not faster than Debian's 2.6 where measured:
# docs/benchmarks.md "oneDNN 3.2 vs 2.6"). Once in .deps/onednn-3.2.0, CMake prefers it.
if [ "${DIFFQ_ONEDNN:-}" = "3.2" ]; then
  ./scripts/onednn.sh
elif [ -n "${DIFFQ_ONEDNN:-}" ]; then
  echo "setup: DIFFQ_ONEDNN='${DIFFQ_ONEDNN}' is not 3.2 (the one other oneDNN setup can install)" >&2
  exit 1
fi

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release ${DIFFQ_CMAKE_ARGS:-}
if [ -n "${DIFFQ_SETUP_TARGET:-}" ]; then
  read -r -a targets <<<"$DIFFQ_SETUP_TARGET"
  cmake --build build --target "${targets[@]}"
  echo "setup: built ${targets[*]}"
else
  cmake --build build
  echo "setup: built build/bin/diffq"
fi
