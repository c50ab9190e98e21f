#!/usr/bin/env bash
# Installs oneDNN 3.2.0 (the pinned PyPI wheels of scripts/onednn-requirements.txt: onednn-cpu-gomp and
# onednn-devel-cpu-gomp 2023.2.0, GNU OpenMP runtime) into the project-local prefix .deps/onednn-3.2.0
# (include/, lib/libdnnl.so.3, lib/cmake/dnnl), which CMakeLists.txt then prefers to Debian's libdnnl-dev
# 2.6. scripts/setup.sh runs it on CPUs with AMX (3.2's AMX kernels are faster there) and wherever
# DIFFQ_ONEDNN=3.2 asks; on AVX512-BF16 (AMD Zen 4) 3.2 was no faster than 2.6 (docs/benchmarks.md "oneDNN 3.2
# vs 2.6"). Its library needs only glibc, libstdc++ and libgomp; diffq's
# binaries find it through their build RPATH. Idempotent: nothing is done when the prefix is complete.
# Without pip or unzip, or offline, it fails naming what is missing (setup.sh then says what it builds on).
set -euo pipefail
cd "$(dirname "$0")/.."

version=3.2.0
prefix=.deps/onednn-$version
if [ -f "$prefix/lib/cmake/dnnl/dnnl-config.cmake" ] && [ -f "$prefix/lib/libdnnl.so.3" ]; then
  echo "setup: oneDNN $version already in $prefix"
  exit 0
fi

. scripts/pip-cmd.sh  # pip_cmd
if [ ${#pip_cmd[@]} -eq 0 ] || ! command -v unzip >/dev/null 2>&1; then
  echo "setup: cannot install oneDNN $version: needs pip (python3-pip) and unzip" >&2
  exit 1
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The wheels are tagged py2.py3-none-manylinux1_x86_64: any local python fetches them; the hashes pin them.
if ! "${pip_cmd[@]}" download --quiet --no-deps --only-binary=:all: --platform manylinux1_x86_64 \
  --require-hashes -r scripts/onednn-requirements.txt -d "$tmp"; then
  echo "setup: cannot install oneDNN $version: pip could not download the wheels of" \
       "scripts/onednn-requirements.txt (offline?)" >&2
  exit 1
fi
for w in "$tmp"/onednn_cpu_gomp-*.whl "$tmp"/onednn_devel_cpu_gomp-*.whl; do
  unzip -q -o "$w" '*.data/data/*' -d "$tmp/unpacked"
done
# Both wheels put their files under <name>-<version>.data/data/ (include/, lib/, share/).
mkdir -p "$tmp/prefix/lib"
for d in "$tmp"/unpacked/*.data/data; do
  cp -a "$d"/include "$tmp/prefix/" 2>/dev/null || true
  cp -a "$d"/share "$tmp/prefix/" 2>/dev/null || true
  [ -d "$d/lib/cmake" ] && cp -a "$d/lib/cmake" "$tmp/prefix/lib/"
  [ -f "$d/lib/libdnnl.so.3.2" ] && cp "$d/lib/libdnnl.so.3.2" "$tmp/prefix/lib/"
done
# The wheel holds libdnnl.so, .so.3 and .so.3.2 as three copies (54 MB each): one file and two links.
ln -s libdnnl.so.3.2 "$tmp/prefix/lib/libdnnl.so.3"
ln -s libdnnl.so.3 "$tmp/prefix/lib/libdnnl.so"
for f in include/oneapi/dnnl/dnnl.hpp include/oneapi/dnnl/dnnl_version.h lib/libdnnl.so.3.2 lib/cmake/dnnl/dnnl-config.cmake; do
  test -f "$tmp/prefix/$f" || { echo "setup: the oneDNN $version wheels hold no $f" >&2; exit 1; }
done
grep -q '#define DNNL_VERSION_MAJOR 3' "$tmp/prefix/include/oneapi/dnnl/dnnl_version.h" &&
  grep -q '#define DNNL_VERSION_MINOR 2' "$tmp/prefix/include/oneapi/dnnl/dnnl_version.h" ||
  { echo "setup: the wheels' dnnl_version.h is not oneDNN 3.2" >&2; exit 1; }
mkdir -p .deps
rm -rf "$prefix" "$prefix.partial"
mv "$tmp/prefix" "$prefix.partial"
mv "$prefix.partial" "$prefix"  # in place only once complete
echo "setup: oneDNN $version installed in $prefix"
