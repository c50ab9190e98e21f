#!/usr/bin/env bash
# Installs the cuDNN frontend (NVIDIA's header-only C++ graph API over cuDNN's backend) into the
# project-local prefix .deps/cudnn-frontend-<version>/include, where CMakeLists.txt looks for it
# (DIFFQ_CUDNN_FRONTEND_INCLUDE). Called by scripts/setup.sh when a CUDA build will happen; runs alone too.
# The headers come from the pinned PyPI wheel nvidia-cudnn-frontend (its include/ folder): Debian packages
# no cuDNN frontend, and the wheel is the release NVIDIA publishes. Idempotent: nothing is done when the
# headers are present. Without pip or unzip it says so and returns 0: the CUDA build then goes without
# cuDNN (the simple kernels stay), as CMake reports.
set -euo pipefail
cd "$(dirname "$0")/.."

version=1.32.0
prefix=.deps/cudnn-frontend-$version
if [ -f "$prefix/include/cudnn_frontend.h" ]; then
  echo "setup: cuDNN frontend $version already in $prefix"
  exit 0
fi

. scripts/pip-cmd.sh  # pip_cmd
if [ ${#pip_cmd[@]} -eq 0 ] || ! command -v unzip >/dev/null 2>&1; then
  echo "setup: NOT installing the cuDNN frontend: needs pip (python3-pip) and unzip;" \
       "the CUDA build goes on without cuDNN attention/convolution" >&2
  exit 0
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Any local python can fetch it: the wheel's headers do not depend on the interpreter it is tagged for.
if ! "${pip_cmd[@]}" download --quiet --no-deps --only-binary=:all: --python-version 3.11 \
  --platform manylinux_2_28_x86_64 --implementation cp "nvidia-cudnn-frontend==$version" -d "$tmp"; then
  echo "setup: NOT installing the cuDNN frontend: pip could not download nvidia-cudnn-frontend==$version" \
       "(offline?); the CUDA build goes on without cuDNN attention/convolution" >&2
  exit 0
fi
wheel=$(ls "$tmp"/nvidia_cudnn_frontend-"$version"-*.whl)
unzip -q "$wheel" 'include/*' -d "$tmp/unpacked"
test -f "$tmp/unpacked/include/cudnn_frontend.h" || { echo "setup: $wheel has no include/cudnn_frontend.h" >&2; exit 1; }
mkdir -p "$prefix"
rm -rf "$prefix/include.partial"
mv "$tmp/unpacked/include" "$prefix/include.partial"
mv "$prefix/include.partial" "$prefix/include"  # in place only once complete
echo "setup: cuDNN frontend $version installed in $prefix/include"
