#!/usr/bin/env bash
# Fresh-install check: does scripts/debian-packages.txt name every package the build needs?
# In a bare Debian 12 root (debootstrap --variant=minbase bookworm, from the mirror the host's apt
# sources name) it installs exactly the packages of scripts/debian-packages.txt with
# --no-install-recommends, copies the working tree in (git ls-files -co --exclude-standard), runs
# scripts/setup.sh there (SKIP_APT=1; configure, then only the diffq_deps_check target, which includes
# and calls every library the build links) and runs diffq_deps_check. CI runs it (.ci/run).
#   ./scripts/fresh-install-check.sh                 # the check
#   ./scripts/fresh-install-check.sh --without PKG   # drop PKG from the list (repeatable): must FAIL
#   ./scripts/fresh-install-check.sh --full          # build everything in the root + smoke tests (long;
#                                                    #   DIFFQ_FRESH_FULL_TARGETS="diffq test_io" limits it)
#   ./scripts/fresh-install-check.sh --keep          # leave the scratch root for inspection
#   ./scripts/fresh-install-check.sh --refresh       # debootstrap the cached bare root again
# Cache: ${DIFFQ_FRESH_CACHE:-$HOME/.cache/diffq/fresh-install}: the BARE root as a tarball (never one
# with packages installed; each run extracts it into a scratch folder there), the downloaded .debs
# (bind-mounted as the root's /var/cache/apt/archives) and the last run's logs (logs/).
# DIFFQ_FRESH_MIRROR=URL overrides the mirror. Needs root (debootstrap, mount, chroot); as another
# user it re-runs itself with sudo. It runs in its own mount namespace, so its mounts never show on
# the host and vanish with it even if it is killed; it unmounts them itself on every exit anyway.
set -euo pipefail
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
repo=$(cd "$(dirname "$0")/.." && pwd)
script=$repo/scripts/$(basename "$0")

usage() { awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$script"; }

orig_args=("$@")
keep=0 full=0 refresh=0
without=()
while [ $# -gt 0 ]; do
  case "$1" in
    --keep) keep=1 ;;
    --full) full=1 ;;
    --refresh) refresh=1 ;;
    --without)
      [ $# -ge 2 ] || { echo "fresh-install: --without needs a package name" >&2; exit 2; }
      without+=("$2")
      shift
      ;;
    --without=*) without+=("${1#--without=}") ;;
    -h | --help) usage; exit 0 ;;
    *) echo "fresh-install: unknown option $1" >&2; usage >&2; exit 2 ;;
  esac
  shift
done

# ---- the package list -------------------------------------------------------------------------------
mapfile -t pkgs < <(grep -v -E '^\s*(#|$)' "$repo/scripts/debian-packages.txt")
for w in "${without[@]}"; do
  found=0
  for p in "${pkgs[@]}"; do [ "$p" = "$w" ] && found=1; done
  [ $found = 1 ] || { echo "fresh-install: --without $w: no such line in scripts/debian-packages.txt" >&2; exit 2; }
done
install=()
for p in "${pkgs[@]}"; do
  skip=0
  for w in "${without[@]}"; do [ "$p" = "$w" ] && skip=1; done
  [ $skip = 1 ] || install+=("$p")
done

cache=${DIFFQ_FRESH_CACHE:-${HOME:?HOME is not set: set DIFFQ_FRESH_CACHE}/.cache/diffq/fresh-install}

# ---- root, and a private mount namespace -------------------------------------------------------------
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "fresh-install: needs root (debootstrap, mount, chroot) and there is no sudo" >&2; exit 1; }
  echo "fresh-install: needs root (debootstrap, mount, chroot): re-running with sudo"
  mapfile -t fresh_env < <(env | grep '^DIFFQ_FRESH_' | grep -v '^DIFFQ_FRESH_CACHE=')
  exec sudo env "${fresh_env[@]}" DIFFQ_FRESH_CACHE="$cache" "$script" "${orig_args[@]}"
fi
for tool in debootstrap unshare mount umount chroot tar git flock mknod; do
  if ! command -v "$tool" >/dev/null; then
    echo "fresh-install check FAILED: host tool '$tool' not found" \
      "(debootstrap: apt-get install debootstrap, it is in scripts/debian-packages.txt)" >&2
    exit 1
  fi
done
if [ "${DIFFQ_FRESH_IN_NS:-}" != 1 ]; then
  DIFFQ_FRESH_IN_NS=1 DIFFQ_FRESH_CACHE="$cache" exec unshare --mount --propagation private -- \
    "$script" "${orig_args[@]}"
fi
unset DIFFQ_FRESH_IN_NS

mkdir -p "$cache"
cache=$(realpath "$cache")
case "$cache" in
  *[[:space:]\\]*) echo "fresh-install: the cache path '$cache' has a space or backslash; set DIFFQ_FRESH_CACHE" >&2; exit 1 ;;
esac
exec 9>"$cache/lock"
if ! flock -n 9; then
  echo "fresh-install: another check holds $cache/lock; waiting"
  flock 9
fi

arch=$(dpkg --print-architecture)
bare=$cache/bare-bookworm-minbase-$arch.tar
debs=$cache/debs
logdir=$cache/logs
nice_level=${DIFFQ_FRESH_NICE:-10}
rm -rf "$logdir"
mkdir -p "$logdir" "$debs/partial"

now_us() { echo "${EPOCHREALTIME//[.,]/}"; }
fmt_s() { local us=$1; printf '%d.%ds' $((us / 1000000)) $((us % 1000000 / 100000)); }
t_start=$(now_us)

# ---- state for the exit trap ------------------------------------------------------------------------
scratch="" root="" step_pid="" current="start" failed_step="" failed_log="" result=""
phases=()
mounted=()

mounts_under() {  # mount points at or below $1, deepest first
  awk -v p="$1" '{ m = $5; gsub(/\\040/, " ", m); if (m == p || index(m, p "/") == 1) print m }' \
    /proc/self/mountinfo | sort -r
}
kill_root_procs() {  # processes whose root is $1 (ours: started in the chroot)
  local r=$1 p pids=() i
  for p in /proc/[0-9]*; do
    [ "$(readlink "$p/root" 2>/dev/null)" = "$r" ] && pids+=("${p#/proc/}")
  done
  [ ${#pids[@]} -eq 0 ] && return 0
  kill -TERM "${pids[@]}" 2>/dev/null
  for i in 1 2 3 4 5 6 7 8 9 10; do
    kill -0 "${pids[@]}" 2>/dev/null || return 0
    sleep 0.5
  done
  kill -KILL "${pids[@]}" 2>/dev/null
  sleep 0.5
}
unmount_under() {  # unmounts everything at or below $1; fails if anything is left
  local d=$1 m i
  for i in 1 2 3; do
    while IFS= read -r m; do
      umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || echo "fresh-install: cannot unmount $m" >&2
    done < <(mounts_under "$d")
    [ -z "$(mounts_under "$d")" ] && return 0
  done
  return 1
}
safe_rm() {  # rm -rf $1, only once nothing is mounted below it (a bind mount would be deleted through)
  local d=$1
  [ -e "$d" ] || return 0
  if ! unmount_under "$d"; then
    echo "fresh-install: still mounted below $d, NOT deleting it:" >&2
    mounts_under "$d" >&2
    return 1
  fi
  rm -rf --one-file-system "$d"
}

cleanup() {
  local rc=$? m
  set +e
  trap - EXIT INT TERM HUP
  if [ -n "$step_pid" ] && kill -0 "$step_pid" 2>/dev/null; then
    kill -TERM -- "-$step_pid" 2>/dev/null
    wait "$step_pid" 2>/dev/null
  fi
  [ -n "$root" ] && kill_root_procs "$root"
  # What this script mounted, last first; then anything else left below the scratch folder.
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
    m=${mounted[i]}
    if mountpoint -q "$m"; then umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null; fi
  done
  if [ -n "$scratch" ]; then
    if [ $keep = 1 ] && unmount_under "$scratch"; then
      touch "$scratch/KEPT"
      echo "fresh-install: kept $root (unmounted; delete with: rm -rf $scratch)"
    elif [ $keep = 1 ]; then
      echo "fresh-install: still mounted below $scratch:" >&2
      mounts_under "$scratch" >&2
      rc=1
    else
      safe_rm "$scratch" || rc=1
    fi
  fi
  echo
  if [ $rc -eq 0 ] && [ "$result" = passed ]; then
    printf '  %s\n' "${phases[@]}"
    echo "fresh-install check passed ($(fmt_s $(($(now_us) - t_start))) in all; logs: $logdir)"
    exit 0
  fi
  [ $rc -eq 0 ] && rc=1
  [ -n "$failed_step" ] || failed_step="$current (exit status $rc)"
  if [ -n "$failed_log" ] && [ -f "$failed_log" ]; then
    echo "---- last 40 lines of $failed_log ----"
    tail -n 40 "$failed_log"
    echo "----"
    # What was not found, as CMake, the compiler, the linker, apt or ctest say it.
    grep -E 'Could NOT find|Could not find|not found|No package .* found|fatal error:|error: #error|cannot find -l|undefined reference|Unable to locate package|^FAILED:|tests failed out of' \
      "$failed_log" | grep -v -E '^-- .*- not found$|^ *[0-9]+ \| ' | awk '!seen[$0]++' | head -n 12 |
      sed 's/^/  error: /'
  fi
  [ ${#phases[@]} -gt 0 ] && printf '  %s\n' "${phases[@]}"
  echo "fresh-install check FAILED: $failed_step"
  exit "$rc"
}
trap cleanup EXIT
trap 'failed_step="$current (interrupted)"; exit 130' INT
trap 'failed_step="$current (terminated)"; exit 143' TERM HUP

# Runs "$@" as a job of its own (its own process group, stdin /dev/null), output to a log. On failure
# the exit trap names the step and prints the log's tail.
set -m
run_step() {  # run_step NAME LOGNAME CMD...: returns CMD's status, sets step_us and step_log
  local name=$1 t0 rc=0
  step_log=$logdir/$2.log
  shift 2
  current=$name
  echo "fresh-install: $name ..."
  t0=$(now_us)
  step_t0=$t0
  "$@" </dev/null >"$step_log" 2>&1 &
  step_pid=$!
  wait "$step_pid" || rc=$?
  step_pid=""
  step_us=$(($(now_us) - t0))
  return $rc
}
step() {  # step NAME LOGNAME CMD...: run_step, and stop the check if CMD fails
  local rc=0
  run_step "$@" || rc=$?
  if [ $rc -ne 0 ]; then
    failed_step=$1 failed_log=$step_log
    exit $rc
  fi
}
phase() { phases+=("$(printf '%-34s %s' "$1" "$(fmt_s "$2")")"); }

# The host's proxy variables, if any, reach apt in the root; nothing else of its environment does.
mapfile -t proxy_env < <(env | grep -E '^(https?|ftp|no)_proxy=|^(HTTPS?|FTP|NO)_PROXY=' || true)
in_root() {  # in_root 'shell command': runs it in the chroot with a clean environment, niced
  nice -n "$nice_level" env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    HOME=/root LANG=C.UTF-8 TERM=dumb DEBIAN_FRONTEND=noninteractive "${proxy_env[@]}" \
    chroot "$root" /bin/bash -c "set -euo pipefail; $1" 9>&-
}
mount_in() {  # mount_in ARGS... MOUNTPOINT: mounts and remembers it for the exit trap
  mount "$@"
  mounted+=("${*: -1}")
}

# ---- the mirror -------------------------------------------------------------------------------------
# Prints "URI SUITE COMPONENTS..." for every enabled deb entry of the host's apt sources.
host_sources() {
  local f
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    sed -e 's/#.*//' "$f" | awk '$1 == "deb" {
      i = 2
      if ($2 ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
      c = ""; for (k = i + 2; k <= NF; k++) c = c " " $k
      if (i + 1 <= NF) print $i, $(i + 1) c }'
  done
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    awk 'function flush(  n, m, i, j, U, S) {
           if ((" " types " ") ~ / deb / && enabled !~ /^(no|false)$/) {
             n = split(uris, U, " "); m = split(suites, S, " ")
             for (i = 1; i <= n; i++) for (j = 1; j <= m; j++) print U[i], S[j], comps
           }
           types = uris = suites = comps = key = ""; enabled = "yes"
         }
         BEGIN { enabled = "yes" }
         /^[ \t]*#/ { next }
         /^[ \t]*$/ { flush(); next }
         /^[ \t]/ { v = $0; sub(/^[ \t]+/, "", v)
                    if (key == "uris") uris = uris " " v; else if (key == "suites") suites = suites " " v
                    else if (key == "components") comps = comps " " v; else if (key == "types") types = types " " v
                    next }
         { key = tolower(substr($0, 1, index($0, ":") - 1)); v = substr($0, index($0, ":") + 1)
           gsub(/^[ \t]+|[ \t]+$/, "", v)
           if (key == "types") types = v; else if (key == "uris") uris = v
           else if (key == "suites") suites = v; else if (key == "components") comps = v
           else if (key == "enabled") enabled = tolower(v) }
         END { flush() }' "$f"
  done
}
mapfile -t entries < <(host_sources | awk '$1 ~ /^(https?|ftp):\/\// && $2 ~ /^bookworm(-updates|-security)?$/' |
  sed -e 's#/ # #' | awk '!seen[$1 " " $2]++')
mirror=${DIFFQ_FRESH_MIRROR:-}
if [ -z "$mirror" ]; then
  for e in "${entries[@]}"; do
    read -r u s _ <<<"$e"
    if [ "$s" = bookworm ]; then mirror=$u; break; fi
  done
fi
if [ -z "$mirror" ]; then
  echo "fresh-install check FAILED: no Debian bookworm mirror in the host's apt sources" \
    "(/etc/apt/sources.list, /etc/apt/sources.list.d/*.list, *.sources: a 'deb' entry with suite" \
    "bookworm); set DIFFQ_FRESH_MIRROR, e.g. DIFFQ_FRESH_MIRROR=http://deb.debian.org/debian" >&2
  exit 1
fi
mirror=${mirror%/}
# The root's sources.list: the host's bookworm, bookworm-updates and bookworm-security entries, as a
# fresh Debian 12 install has them (the mirror alone where the host has none).
root_sources=()
for e in "${entries[@]}"; do
  read -r u s c <<<"$e"
  root_sources+=("deb ${u%/} $s ${c:-main}")
done
if [ -n "${DIFFQ_FRESH_MIRROR:-}" ] || [ ${#root_sources[@]} -eq 0 ]; then
  root_sources=("deb $mirror bookworm main")
fi
need_ca=0
printf '%s\n' "$mirror" "${root_sources[@]}" | grep -q 'https://' && need_ca=1

echo "fresh-install: Debian 12 (bookworm, $arch) from $mirror; cache $cache"
[ ${#without[@]} -gt 0 ] && echo "fresh-install: without ${without[*]} (this run should FAIL)"

# Roots of earlier runs that were killed before their trap ran (not those kept with --keep).
for d in "$cache"/run.* "$cache"/bare.*; do
  if [ -d "$d" ] && [ ! -e "$d/KEPT" ]; then safe_rm "$d" || exit 1; fi
done

# ---- 1. the bare root (debootstrap once, then the cached tarball) ------------------------------------
make_bare() {
  local tmp=$1
  local include=()
  [ $need_ca = 1 ] && include=(--include=ca-certificates)
  debootstrap --variant=minbase "${include[@]}" bookworm "$tmp/root" "$mirror"
  rm -f "$tmp"/root/var/cache/apt/archives/*.deb
  rm -rf "$tmp"/root/var/lib/apt/lists/*
  tar --numeric-owner --xattrs -cpf "$tmp/bare.tar" -C "$tmp/root" .
}
if [ $refresh = 1 ] || [ ! -f "$bare" ]; then
  tmp=$(mktemp -d "$cache/bare.XXXXXX")
  scratch=$tmp  # so the exit trap unmounts and deletes it
  step "debootstrap (bare root)" 01-debootstrap make_bare "$tmp"
  mv "$tmp/bare.tar" "$bare"
  printf 'debootstrap --variant=minbase bookworm %s\n%s\n%s\n' "$mirror" "$(debootstrap --version)" \
    "$(date -u +%FT%TZ)" >"$bare.info"
  safe_rm "$tmp"
  scratch=""
  phase "debootstrap (cache was empty)" "$step_us"
  bare_label="extract the new bare root"
else
  bare_label="bare root: cache hit (extract)"
fi

# ---- 2. a scratch copy of it, mounts ----------------------------------------------------------------
scratch=$(mktemp -d "$cache/run.XXXXXX")
root=$scratch/root
# The scratch root lives on a tmpfs where memory allows (dpkg unpacks faster, and clean-up is an
# unmount, not minutes of rm -rf), on disk with --keep (the tmpfs would vanish with this mount
# namespace) and --full (the build folder is several GiB).
tmpfs=${DIFFQ_FRESH_TMPFS:-auto}
if [ "$tmpfs" = auto ]; then
  tmpfs=0
  mem_kib=$(awk '$1 == "MemAvailable:" { print $2 }' /proc/meminfo)
  [ $keep = 0 ] && [ $full = 0 ] && [ "${mem_kib:-0}" -ge $((4 * 1024 * 1024)) ] && tmpfs=1
fi
[ $keep = 1 ] && tmpfs=0
if [ "$tmpfs" = 1 ]; then
  current="mount a tmpfs on $scratch"
  mount_in -t tmpfs -o size=6g,mode=755 tmpfs "$scratch"
fi
mkdir "$root"
copy_bare() { tar --numeric-owner --xattrs -xpf "$bare" -C "$root"; }
step "extract the bare root" 02-extract copy_bare
phase "$bare_label" "$step_us"

current="prepare the root (mount /proc, /sys, /dev, the .deb cache; apt sources)"
mount_in -t proc proc "$root/proc"
mount_in -t sysfs -o ro,nosuid,nodev,noexec sysfs "$root/sys"
# A tmpfs /dev with the usual nodes, not a bind mount of the host's /dev: nothing deleted in the root
# can reach the host's devices.
mount_in -t tmpfs -o mode=755,nosuid tmpfs "$root/dev"
for n in "null 1 3" "zero 1 5" "full 1 7" "random 1 8" "urandom 1 9" "tty 5 0"; do
  read -r name maj min <<<"$n"
  mknod -m 666 "$root/dev/$name" c "$maj" "$min"
done
ln -s /proc/self/fd "$root/dev/fd"
ln -s /proc/self/fd/0 "$root/dev/stdin"
ln -s /proc/self/fd/1 "$root/dev/stdout"
ln -s /proc/self/fd/2 "$root/dev/stderr"
mkdir "$root/dev/pts" "$root/dev/shm"
mount_in -t devpts -o newinstance,ptmxmode=0666,mode=620 devpts "$root/dev/pts"
ln -s pts/ptmx "$root/dev/ptmx"
mount_in -t tmpfs -o mode=1777,nosuid,nodev tmpfs "$root/dev/shm"
mount_in --bind "$debs" "$root/var/cache/apt/archives"

cp -L /etc/resolv.conf "$root/etc/resolv.conf"
printf '%s\n' "${root_sources[@]}" >"$root/etc/apt/sources.list"
# The host's apt settings for reaching its mirror (proxy, Release validity), nothing else.
apt-config dump | grep -E '^Acquire::((https?|ftp)::Proxy|Check-Valid-Until|Check-Date|Retries)' \
  >"$root/etc/apt/apt.conf.d/90diffq-fresh-host" || true
printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"  # no services start in the root
# No fsync per unpacked file (as in Debian's container images): the root is thrown away anyway.
echo force-unsafe-io >"$root/etc/dpkg/dpkg.cfg.d/90diffq-fresh-unsafe-io"
chmod 755 "$root/usr/sbin/policy-rc.d"

# ---- 3. the packages --------------------------------------------------------------------------------
step "apt install (${#install[@]} packages)" 03-apt in_root "apt-get update &&
  apt-get install -y --no-install-recommends ${install[*]} && apt-get autoclean"
phase "apt install (${#install[@]} packages)" "$step_us"

# ---- 4. the working tree ----------------------------------------------------------------------------
copy_tree() {
  mkdir -p "$root/src/diffq"
  git -C "$repo" ls-files -co --exclude-standard -z |
    while IFS= read -r -d '' f; do
      if [ -e "$repo/$f" ] || [ -L "$repo/$f" ]; then printf '%s\0' "$f"; fi
    done |
    tar -C "$repo" --null -T - -cf - | tar -C "$root/src/diffq" -xpf -
}
step "copy the working tree" 04-copy copy_tree
phase "copy the working tree" "$step_us"

# ---- 5. configure + build (scripts/setup.sh) --------------------------------------------------------
mark=$logdir/configured-at
run_setup() {  # run_setup [TARGETS]: setup.sh in the root; notes when configure ended
  rm -f "$mark"
  in_root "cd /src/diffq && SKIP_APT=1 ${1:+DIFFQ_SETUP_TARGET='$1'} ./scripts/setup.sh" 2>&1 |
    while IFS= read -r line; do
      printf '%s\n' "$line"
      if [[ $line == "-- Build files have been written to:"* ]]; then now_us >"$mark"; fi
    done
}
if [ $full = 1 ]; then
  targets=${DIFFQ_FRESH_FULL_TARGETS:-}
else
  targets=diffq_deps_check
fi
rc=0
run_step "configure + build ${targets:-everything} (scripts/setup.sh)" 05-setup run_setup "$targets" || rc=$?
if [ ! -f "$mark" ]; then
  failed_step="configure (cmake, scripts/setup.sh)" failed_log=$step_log
  exit $((rc ? rc : 1))
fi
configure_us=$(($(cat "$mark") - step_t0))
phase "configure" "$configure_us"
phase "build ${targets:-everything}" $((step_us - configure_us))
if [ $rc -ne 0 ]; then
  failed_step="build ${targets:-everything}" failed_log=$step_log
  exit $rc
fi
if [ $full = 1 ]; then
  step "build diffq_deps_check" 06-deps-build in_root "cd /src/diffq && cmake --build build --target diffq_deps_check"
  phase "build diffq_deps_check" "$step_us"
fi

# ---- 6. run it --------------------------------------------------------------------------------------
step "run diffq_deps_check" 07-deps-run in_root "/src/diffq/build/bin/diffq_deps_check"
phase "run diffq_deps_check" "$step_us"
sed 's/^/  /' "$logdir/07-deps-run.log"

if [ $full = 1 ]; then
  step "smoke tests (ctest -R '^(Safetensors|Png|GGUF)')" 08-ctest in_root \
    "cd /src/diffq && ctest --test-dir build --output-on-failure -j \$(nproc) -LE gpu -R '^(Safetensors|Png|GGUF)'"
  phase "smoke tests" "$step_us"
  tail -n 3 "$logdir/08-ctest.log" | sed 's/^/  /'
fi

current="clean up"
result=passed
