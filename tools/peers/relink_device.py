#!/usr/bin/env python3
"""Relinks build/'s diffq and test_cuda for the GPU machine, from the objects and archives build/ already has
(no recompilation), into STAGE/bin, with the shared libraries they still need in STAGE/lib: what
scripts/device-check.sh --pack ships. The device image is not Debian 12, and a device call receives at most
64 MiB, so against the plain build (~240 MB of shared libraries, ~90 MB compressed):
  * static where Debian ships the archive and it pays: libpng, zlib, ICU, OpenSSL's libcrypto. OpenBLAS
    stays shared although Debian ships its archive: its CPU-dispatch table pulls in every kernel (~25 MB
    of text in each binary, against one 36 MB library for both); oneDNN, Highway, cpp-httplib and the
    OpenCL loader have no archive; libstdc++ stays shared too (oneDNN needs it: one copy in the process).
    Those go to STAGE/lib with libgfortran, libgomp and the rest of their needs;
  * ICU's data (31 MB) cut to what diffq's tokenizers use (normalization, character properties, grapheme
    breaks of the root locale): the archive's data package less locales, collation, converters,
    dictionaries, time zones, units, transliteration (icupkg), compiled back in (genccode);
  * FFmpeg's libraries (libav*, swscale: mp4 / WebP writing and video reading, with ~125 MB of codec
    libraries behind them) and cpp-httplib (`diffq serve`, with OpenSSL and brotli) left out: each of their
    functions diffq references is a stub that prints which one was called and aborts (their data symbols,
    vtables and the like, zeros). The device run writes PNGs and latents (safetensors), never video, and
    serves nothing;
  * CUDA's and cuDNN's libraries are not shipped: the device has them (/usr/local/cuda/lib64, torch's cuDNN);
  * stripped; RUNPATH $ORIGIN/../lib.
Then a self-test on this machine's CPU: the relinked diffq must write the same bytes as build/'s on the tiny
FLUX and Wan fixtures (latents), and the relinked test_cuda must list the same tests.

  relink_device.py --build build --stage DIR [--no-self-test]
Only the standard library; needs binutils, icupkg and genccode (icu-devtools) and the build's compiler.
"""
from __future__ import annotations

import argparse
import filecmp
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIBDIR = "/usr/lib/x86_64-linux-gnu"
STATIC = {  # a shared library on the link line -> the archives that replace it
    f"{LIBDIR}/libpng.so": [f"{LIBDIR}/libpng16.a"],
    f"{LIBDIR}/libpng16.so": [f"{LIBDIR}/libpng16.a"],
    f"{LIBDIR}/libz.so": [f"{LIBDIR}/libz.a"],
    f"{LIBDIR}/libicuuc.so": [f"{LIBDIR}/libicuuc.a"],
    f"{LIBDIR}/libcrypto.so": [f"{LIBDIR}/libcrypto.a"],
}
# Left out, their functions stubbed: FFmpeg (video / WebP I/O, ~125 MB with its codecs) and cpp-httplib
# (`diffq serve` only; with OpenSSL and brotli behind it).
LIBAV = re.compile(r"/lib(avcodec|avformat|avutil|avfilter|avdevice|swscale|swresample|cpp-httplib)\.so[.0-9]*$")
ICUDATA = re.compile(r"/libicudata\.so$")
# ICU data items kept (everything else goes): see the docstring.
ICU_KEEP = re.compile(r"^(root\.res|res_index\.res|pool\.res|likelySubtags\.res|metadata\.res|icuver\.res|icustd\.res|"
                      r"supplementalData\.res|en(_US(_POSIX)?)?\.res|cnvalias\.icu|uemoji\.icu|ulayout\.icu|"
                      r"[a-z_0-9]+\.nrm|brkitr/(root|res_index|en|en_US|en_US_POSIX)\.res|brkitr/char\.brk)$")
NOT_SHIPPED = re.compile(r"^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|libutil\.so|"
                         r"libcuda\.so|libcudart|libcublas|libcublasLt|libcudnn|libnvrtc|libnvJitLink|libcufft|"
                         r"libcurand|libcusparse|libcusolver|libnvToolsExt|libnccl)")


def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw).stdout


def link_command(build: Path, target: str) -> str:
    lines = [l for l in sh(["ninja", "-C", str(build), "-t", "commands", f"bin/{target}"]).splitlines() if l.strip()]
    cmd = lines[-1]
    if cmd.startswith(": && "):
        cmd = cmd[len(": && "):]
    return cmd.split(" && ")[0]


def gcc_file(cxx: str, name: str) -> str:
    p = sh([cxx, f"-print-file-name={name}"]).strip()
    if not os.path.isabs(p):
        raise RuntimeError(f"{cxx} knows no {name}")
    return p


def icu_subset(work: Path, cc: str) -> Path:
    """ICU's data archive less what diffq does not use, as an object defining the same icudtNN_dat."""
    d = work / "icu"
    if (d / "libicudata_subset.a").exists():
        return d / "libicudata_subset.a"
    d.mkdir(parents=True, exist_ok=True)
    sh(["ar", "x", f"{LIBDIR}/libicudata.a"], cwd=d)
    objs = list(d.glob("icudt*_dat.o"))
    if len(objs) != 1:
        raise RuntimeError(f"libicudata.a: expected one icudtNN?_dat.o, found {objs}")
    pkg = objs[0].name[:-len("_dat.o")]  # icudt72l
    entry = re.sub(r"[lbe]$", "", pkg)  # icudt72: the symbol is icudt72_dat
    full = d / f"{pkg}.dat"
    sh(["objcopy", "-O", "binary", "--only-section=.rodata", str(objs[0]), str(full)])
    items = [l.strip() for l in sh(["icupkg", "-l", str(full)]).splitlines() if l.strip()]
    drop = [i for i in items if not ICU_KEEP.match(i.split("/", 1)[1] if i.startswith(pkg + "/") else i)]
    (d / "drop.txt").write_text("\n".join(drop) + "\n")
    small = d / "subset" / f"{pkg}.dat"
    small.parent.mkdir(exist_ok=True)
    sh(["icupkg", "--ignore-deps", "-r", str(d / "drop.txt"), str(full), str(small)])  # word-break dictionaries: unused
    sh(["genccode", "-e", entry, "-a", "gcc", "-d", str(d), str(small)])
    asm = next(d.glob(f"{pkg}_dat.S"), None) or next(d.glob("*.S"))
    obj, out = d / "icudata_subset.o", d / "libicudata_subset.a"  # an archive: linked only where referenced
    sh([cc, "-c", str(asm), "-o", str(obj)])
    sh(["ar", "rcs", str(out), str(obj)])
    print(f"  ICU data: {len(items) - len(drop)} of {len(items)} items kept, {full.stat().st_size >> 20} MB -> "
          f"{small.stat().st_size // 1024} KB")
    return out


def libav_stubs(work: Path, cc: str, inputs: list[str], libs: list[str], build: Path) -> Path:
    """Functions of `libs` (FFmpeg's) that `inputs` reference: each a stub that names itself and aborts."""
    undefined = set()
    for f in inputs:
        p = build / f if not os.path.isabs(f) else Path(f)
        if p.suffix in (".a", ".o") and p.exists():
            for line in sh(["nm", "-u", "--format=posix", str(p)]).splitlines():
                parts = line.split()
                if len(parts) >= 2 and parts[1] in ("U", "w"):
                    undefined.add(parts[0])
    funcs, data = {}, {}
    for lib in libs:
        real = os.path.realpath(lib)
        for line in sh(["nm", "-D", "--defined-only", "--format=posix", real]).splitlines():
            parts = line.split()
            if len(parts) < 2:
                continue
            name = parts[0].split("@")[0]
            if name not in undefined:
                continue
            if parts[1] in ("T", "t", "W", "i"):
                funcs[name] = lib
            else:
                size = int(parts[3], 16) if len(parts) > 3 else 8
                data[name] = max(size, 8)
    src = ["    .section .rodata.diffq_noav,\"a\"", "diffq_noav_fmt:", "    .string \"diffq: %s is in a library this "
           "device build leaves out (scripts/device-check.sh --pack: FFmpeg, cpp-httplib: no video or WebP I/O, no "
           "diffq serve)\\n\""]
    for i, name in enumerate(sorted(funcs)):
        src += [f"diffq_noav_name{i}:", f"    .string \"{name}\""]
    src += ["    .text"]
    for i, name in enumerate(sorted(funcs)):
        src += [f"    .globl {name}", f"    .type {name},@function", f"{name}:",
                f"    leaq diffq_noav_name{i}(%rip), %rdi", "    jmp diffq_noav_abort"]
    src += ["diffq_noav_abort:", "    subq $8, %rsp", "    movq %rdi, %rdx", "    leaq diffq_noav_fmt(%rip), %rsi",
            "    movq stderr@GOTPCREL(%rip), %rax", "    movq (%rax), %rdi", "    xorl %eax, %eax",
            "    call fprintf@PLT", "    call abort@PLT"]
    if data:
        src += ["    .data"]
        for name, size in sorted(data.items()):
            src += [f"    .globl {name}", f"    .type {name},@object", f"    .size {name},{size}", "    .balign 16",
                    f"{name}:", f"    .zero {size}"]
    src += ["    .section .note.GNU-stack,\"\",@progbits"]
    asm = work / "noav.S"
    asm.write_text("\n".join(src) + "\n")
    obj, out = work / "noav.o", work / "libnoav.a"
    sh([cc, "-c", str(asm), "-o", str(obj)])
    sh(["ar", "rcs", str(out), str(obj)])
    print(f"  {', '.join(sorted({Path(l).name for l in libs}))}: {len(funcs)} functions and {len(data)} data symbols stubbed")
    return out


def relink(build: Path, stage: Path, work: Path, target: str) -> Path:
    tokens = shlex.split(link_command(build, target))
    cxx = tokens[0]
    cc = cxx  # g++ assembles .S as well
    out_tokens, libav, seen_static = [], [], set()
    icu_obj = None
    i = 0
    while i < len(tokens):
        t = tokens[i]
        if t == "-o":
            out_tokens += ["-o", str(stage / "bin" / target)]
            i += 2
            continue
        if t.startswith("-Wl,-rpath,"):
            i += 1
            continue
        if LIBAV.search(t):
            libav.append(t)
        elif ICUDATA.search(t):
            icu_obj = icu_obj or icu_subset(work, cc)
            out_tokens.append(str(icu_obj))
        elif t in STATIC:
            for a in STATIC[t]:
                a = gcc_file(cxx, a[1:]) if a.startswith("@") else a
                out_tokens.append(a)
        else:
            out_tokens.append(t)
        i += 1
    if libav:
        out_tokens.append(str(libav_stubs(work, cc, tokens, libav, build)))
    out_tokens[1:1] = ["-s", "-Wl,-rpath,$ORIGIN/../lib"]
    (stage / "bin").mkdir(parents=True, exist_ok=True)
    p = subprocess.run(out_tokens, cwd=build, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"relinking {target} failed:\n{p.stderr[-3000:]}")
    return stage / "bin" / target


def ship_libs(stage: Path, bins: list[Path]):
    lib = stage / "lib"
    lib.mkdir(parents=True, exist_ok=True)
    shipped = {}
    for _ in range(3):  # the libraries' own needs too (ldd lists them; a second round is a check)
        for b in bins + sorted(lib.iterdir()):
            for line in sh(["ldd", str(b)]).splitlines():
                m = re.match(r"\s*(\S+) => (/\S+)", line)
                if not m or NOT_SHIPPED.match(m.group(1)):
                    continue
                name, path = m.group(1), m.group(2)
                if not (lib / name).exists():
                    shutil.copy(os.path.realpath(path), lib / name)
                    shipped[name] = os.path.getsize(lib / name)
    missing = [l for b in bins for l in sh(["ldd", str(b)]).splitlines() if "not found" in l]
    return shipped, missing


def self_test(build: Path, stage: Path, work: Path) -> list[str]:
    """The relinked diffq against build/'s on the CPU (same bytes), test_cuda's test list against build/'s."""
    errors = []
    runs = {"flux": ["-m", str(ROOT / "tests/fixtures/tiny-flux"), "--width", "32", "--height", "32", "-o", "{d}/img.png",
                     "--output-latents", "{d}/latents.safetensors"],
            "wan": ["-m", str(ROOT / "tests/fixtures/tiny-wan"), "--width", "32", "--height", "32", "--frames", "5",
                    "--output-type", "latent", "-o", "{d}/latents.safetensors"]}
    for name, args in runs.items():
        outs = {}
        for who, exe in (("build", build / "bin" / "diffq"), ("stage", stage / "bin" / "diffq")):
            d = work / f"selftest-{name}-{who}"
            d.mkdir(parents=True, exist_ok=True)
            cmd = [str(exe), "generate", "-p", "a red fox on the snow", "--steps", "2", "--seed", "3",
                   "--threads", "2"] + [a.format(d=d) for a in args]
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
            if p.returncode != 0:
                errors.append(f"{who} diffq generate ({name}) exited {p.returncode}: {(p.stdout + p.stderr)[-600:]}")
            outs[who] = d / "latents.safetensors"
        if len(errors) == 0 and not filecmp.cmp(outs["build"], outs["stage"], shallow=False):
            errors.append(f"{name}: the relinked diffq's latents differ from build/'s")
    lists = [re.sub(r"#.*", "", sh([str(b / "bin" / "test_cuda"), "--gtest_list_tests"])) for b in (build, stage)]
    if lists[0] != lists[1]:
        errors.append("the relinked test_cuda lists other tests than build/'s")
    return errors


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=str(ROOT / "build"))
    ap.add_argument("--stage", required=True)
    ap.add_argument("--no-self-test", action="store_true")
    args = ap.parse_args()
    build, stage = Path(args.build).resolve(), Path(args.stage).resolve()
    if stage.exists():
        shutil.rmtree(stage)
    stage.mkdir(parents=True)
    work = Path(tempfile.mkdtemp(prefix="diffq-relink-"))
    try:
        bins = []
        for t in ("test_cuda", "diffq"):
            print(f"relinking {t}")
            bins.append(relink(build, stage, work, t))
        shipped, missing = ship_libs(stage, bins)
        for b in bins:
            print(f"  bin/{b.name}: {b.stat().st_size / 1e6:.1f} MB")
        for n, s in sorted(shipped.items()):
            print(f"  lib/{n}: {s / 1e6:.1f} MB")
        if missing:
            print("unresolved on this machine:\n" + "\n".join(missing), file=sys.stderr)
            return 1
        if not args.no_self_test:
            errors = self_test(build, stage, work)
            if errors:
                print("self-test failed:\n  " + "\n  ".join(errors), file=sys.stderr)
                return 1
            print("self-test: the relinked diffq writes build/'s bytes (tiny FLUX and Wan, CPU); test_cuda lists the same tests")
        return 0
    except (RuntimeError, subprocess.CalledProcessError) as e:
        msg = e.stderr if isinstance(e, subprocess.CalledProcessError) else str(e)
        print(f"relink_device: {msg}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
