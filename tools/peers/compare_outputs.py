#!/usr/bin/env python3
"""The comparison of scripts/device-check.sh's parity part: `diffq generate --device cuda` against the same
command on the CPU. Needs numpy only (the GPU machine's image has it; no torch): the safetensors files are
read here (F64 / F32 / F16 / BF16 and integers; BF16 widened to float32 exactly).

  compare_outputs.py --tol REL GPU.safetensors CPU.safetensors [--png GPU.png CPU.png] [--name NAME]

Latents (safetensors, every tensor the files share; diffq writes key 'latents'): max |gpu - cpu| /
max |cpu| must be <= --tol (the dtype's tolerance, chosen by the caller). PNGs (8-bit, decoded here
without PIL) are reported only: the largest and mean pixel difference, and whether the sizes match.
Prints one JSON line {"name", "ok", "tol", "latents": {...}, "png": {...}} and exits 0 (within), 1 (outside
or unreadable) or 3 (numpy missing).
"""
from __future__ import annotations

import argparse
import json
import struct
import sys
import zlib


def load_safetensors(path: str) -> dict:
    import numpy as np

    kinds = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32,
             "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_, "BF16": np.uint16}
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        body = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        if t["dtype"] not in kinds:
            raise ValueError(f"{path}: {name} has dtype {t['dtype']}, not read here")
        arr = np.frombuffer(body[a:b], dtype=kinds[t["dtype"]]).reshape(t["shape"])
        if t["dtype"] == "BF16":
            arr = (arr.astype(np.uint32) << 16).view(np.float32)
        out[name] = arr
    return out


def read_png(path: str):
    """8-bit grey / grey+alpha / RGB / RGBA, non-interlaced PNG -> numpy uint8 [H, W, C]."""
    import numpy as np

    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError(f"{path}: not a PNG")
    pos, idat, w = 8, b"", None
    while pos < len(data):
        (n,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + n]
        pos += 12 + n
        if kind == b"IHDR":
            w, h, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", body)
            if depth != 8 or interlace != 0 or color not in (0, 2, 4, 6):
                raise ValueError(f"{path}: depth {depth}, colour type {color}, interlace {interlace} not read here")
            ch = {0: 1, 2: 3, 4: 2, 6: 4}[color]
        elif kind == b"IDAT":
            idat += body
        elif kind == b"IEND":
            break
    if w is None:
        raise ValueError(f"{path}: no IHDR")
    raw = np.frombuffer(zlib.decompress(idat), dtype=np.uint8).reshape(h, 1 + w * ch)
    out = np.zeros((h, w * ch), dtype=np.int32)
    prev = np.zeros(w * ch, dtype=np.int32)
    for y in range(h):
        f, line = raw[y, 0], raw[y, 1:].astype(np.int32)
        cur = np.zeros(w * ch, dtype=np.int32)
        if f == 0:
            cur = line
        elif f == 2:
            cur = (line + prev) & 255
        else:  # 1 sub, 3 average, 4 paeth: depend on the pixel to the left, so walk the row
            for i in range(w * ch):
                a = cur[i - ch] if i >= ch else 0
                b = prev[i]
                c = prev[i - ch] if i >= ch else 0
                if f == 1:
                    p = a
                elif f == 3:
                    p = (a + b) >> 1
                else:
                    pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                    p = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                cur[i] = (line[i] + p) & 255
        out[y], prev = cur, cur
    return out.reshape(h, w, ch).astype(np.uint8)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("gpu")
    ap.add_argument("cpu")
    ap.add_argument("--tol", type=float, required=True, help="max |gpu - cpu| / max |cpu| allowed on the latents")
    ap.add_argument("--png", nargs=2, metavar=("GPU_PNG", "CPU_PNG"))
    ap.add_argument("--name", default="")
    args = ap.parse_args()
    res = {"name": args.name, "ok": False, "tol": args.tol}
    try:
        import numpy as np
    except Exception as e:  # noqa: BLE001
        res["error"] = f"numpy: {e}"
        print(json.dumps(res))
        return 3
    try:
        g, c = load_safetensors(args.gpu), load_safetensors(args.cpu)
        keys = sorted(set(g) & set(c))
        if not keys:
            raise ValueError(f"no tensor in common ({sorted(g)} vs {sorted(c)})")
        lat, ok = {}, True
        for k in keys:
            a, b = g[k].astype(np.float64), c[k].astype(np.float64)
            if a.shape != b.shape:
                lat[k] = {"shape_gpu": list(a.shape), "shape_cpu": list(b.shape)}
                ok = False
                continue
            finite = bool(np.isfinite(a).all())
            scale = max(float(np.abs(b).max()), 1e-30)
            rel = float(np.abs(a - b).max() / scale)
            lat[k] = {"shape": list(a.shape), "max_rel": rel,
                      "mean_abs": float(np.abs(a - b).mean()), "max_abs_cpu": scale, "finite": finite}
            ok &= finite and rel <= args.tol
        res["latents"] = lat
        if args.png:
            pg, pc = read_png(args.png[0]), read_png(args.png[1])
            if pg.shape != pc.shape:
                res["png"] = {"shape_gpu": list(pg.shape), "shape_cpu": list(pc.shape)}
                ok = False
            else:
                d = np.abs(pg.astype(np.int32) - pc.astype(np.int32))
                res["png"] = {"shape": list(pg.shape), "max_diff": int(d.max()), "mean_diff": float(d.mean())}
        res["ok"] = bool(ok)
    except Exception as e:  # noqa: BLE001
        res["error"] = f"{type(e).__name__}: {e}"
    print(json.dumps(res))
    return 0 if res["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
