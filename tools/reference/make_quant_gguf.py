"""Writes tests/fixtures/quant/gguf/reference/: reference data for diffq's GGUF quantization types.

Run: tools/.venv/bin/python tools/reference/make_quant_gguf.py   (deterministic: fixed seeds)

Truth comes from two packages:
  gguf 0.19 (gguf-py)     gguf.quants.dequantize for every type; gguf.quants.quantize where it can
  ggml-python 0.0.45      ggml's own C quantizers (ggml_quantize_chunk, no importance matrix =
                          quantize_row_*_ref) for every type, K-quants and IQ4 included

Files:
  dequantize.safetensors  per type T: `T.blocks` u8 (random block bytes; the f16 scales of some blocks
                          replaced by extremes: +-0, subnormals, 65504, inf, NaN) and `T.out` f32
                          = gguf.quants.dequantize(T.blocks)
  quantize.safetensors    `x` f32 [rows, 512]: one awkward case per row (see CASES) + random rows;
                          per type T: `T.q` u8 [rows, row_bytes] = ggml_quantize_chunk(x)
  expected.json           block sizes/bytes, which types gguf-py quantizes (and that it agrees with
                          ggml bit for bit), row-case names, Diffusers' own dequantization finding
"""
from __future__ import annotations

import ctypes
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

OUT = _common.FIXTURES / "quant" / "gguf" / "reference"  # (written.gguf next to it is diffq's, not ours)

TYPES = ["F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K",
         "Q6_K", "IQ4_NL", "IQ4_XS"]
# Byte offsets of the f16 scale fields inside one block (ggml-common.h).
SCALE_OFFSETS = {"Q4_0": [0], "Q4_1": [0, 2], "Q5_0": [0], "Q5_1": [0, 2], "Q8_0": [0], "Q2_K": [80, 82],
                 "Q3_K": [108], "Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208], "IQ4_NL": [0], "IQ4_XS": [0]}
F16_EXTREMES = [0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x0400, 0x3C00, 0xBC00, 0x7BFF, 0xFBFF, 0x7C00,
                0xFC00, 0x7E00, 0x1400]
ROW = 512


def ggml_quantize(x: np.ndarray, qtype) -> np.ndarray:
    import ggml
    from gguf.constants import GGML_QUANT_SIZES

    x = np.ascontiguousarray(x, dtype=np.float32)
    rows, n = x.shape
    bs, ts = GGML_QUANT_SIZES[qtype]
    out = np.zeros((rows, n // bs * ts), dtype=np.uint8)
    size = ggml.ggml_quantize_chunk(int(qtype), x.ctypes.data_as(ctypes.POINTER(ctypes.c_float)),
                                    out.ctypes.data_as(ctypes.c_void_p), 0, rows, n, None)
    assert size == out.size, (qtype, size, out.size)
    return out


def quant_cases(rng: np.random.Generator) -> tuple[np.ndarray, list[str]]:
    """One awkward pattern per row (512 = 2 super-blocks = 16 blocks of 32), then random rows."""
    rows, names = [], []

    def add(name, v):
        v = np.asarray(v, dtype=np.float32).reshape(ROW)
        rows.append(v)
        names.append(name)

    g = rng.standard_normal
    add("normal", g(ROW))
    add("normal_x1e3", g(ROW) * 1e3)
    add("normal_x1e-3", g(ROW) * 1e-3)
    add("zeros", np.zeros(ROW))
    add("constant_pos", np.full(ROW, 0.75))
    add("constant_neg", np.full(ROW, -2.5))
    add("all_positive", np.abs(g(ROW)) + 0.1)
    add("all_negative", -np.abs(g(ROW)) - 0.1)
    v = g(ROW) * 0.01
    v[::37] = 40.0  # outliers
    v[5::41] = -55.0
    add("outliers", v)
    add("tiny_below_eps", g(ROW) * 1e-17)   # sub-blocks under ggml's GROUP_MAX_EPS (1e-15)
    add("subnormal", g(ROW) * 1e-39)
    add("halves", np.round(g(ROW) * 8) / 2)  # exact ties for the rounding rules
    add("int_grid", rng.integers(-8, 8, ROW).astype(np.float32))
    v = g(ROW)
    v[:256] = 0.0  # one all-zero super-block next to a normal one
    v[256 + 32:256 + 64] = 0.0
    add("zero_subblocks", v)
    add("uniform", rng.uniform(-1, 1, ROW))
    v = g(ROW)
    v[::2] *= 1e-4  # wide dynamic range inside every block
    add("mixed_scale", v)
    add("ties_abs_max", np.tile(np.array([3.0, -3.0] + [0.5] * 30), ROW // 32))
    add("large", g(ROW) * 6e4)
    for k in range(8):
        add(f"random{k}", g(ROW) * rng.uniform(0.01, 10))
    return np.stack(rows).astype(np.float32), names


def random_blocks(rng: np.random.Generator, name: str, qtype) -> np.ndarray:
    from gguf.constants import GGML_QUANT_SIZES

    bs, ts = GGML_QUANT_SIZES[qtype]
    if name == "F32":
        vals = rng.standard_normal(64).astype(np.float32) * 10
        special = np.array([0.0, -0.0, np.inf, -np.inf, 1e-45, 3.4e38, np.nan, 1.0], dtype=np.float32)
        return np.concatenate([vals, special]).view(np.uint8)
    if name in ("F16", "BF16"):
        bits = rng.integers(0, 1 << 16, 256, dtype=np.uint16)
        return bits.view(np.uint8)
    n_blocks = 24 if bs == 32 else 12
    blocks = rng.integers(0, 256, (n_blocks, ts), dtype=np.uint8)
    # Sensible scales on most blocks (random bytes would give NaN/inf scales 1/32 of the time).
    for b in range(n_blocks):
        for off in SCALE_OFFSETS[name]:
            h = np.float16(rng.uniform(-2, 2) * 10.0 ** rng.integers(-4, 2))
            blocks[b, off:off + 2] = np.frombuffer(h.tobytes(), dtype=np.uint8)
    # Extremes on the last blocks: every scale field takes each extreme value in turn.
    k = 0
    for b in range(n_blocks - len(F16_EXTREMES) // 2, n_blocks):
        for off in SCALE_OFFSETS[name]:
            h = F16_EXTREMES[k % len(F16_EXTREMES)]
            k += 1
            blocks[b, off:off + 2] = np.array([h & 0xFF, h >> 8], dtype=np.uint8)
    return blocks.reshape(-1)


def diffusers_dequant_finding() -> dict:
    """Diffusers' own torch dequantizers (quantizers/gguf/utils.py) are called without dtype: the
    scale stays float16 and the arithmetic runs in float16, so their weights differ from gguf-py's
    float32 ones. Record by how much on a Q4_K / Q8_0 sample."""
    import torch
    from diffusers.quantizers.gguf.utils import dequantize_functions
    from gguf import GGMLQuantizationType as T
    from gguf.constants import GGML_QUANT_SIZES
    import gguf

    rng = np.random.default_rng(7)
    res = {}
    for name in ("Q8_0", "Q4_K"):
        t = T[name]
        x = rng.standard_normal((4, 256)).astype(np.float32)
        q = ggml_quantize(x, t)
        bs, ts = GGML_QUANT_SIZES[t]
        blocks = torch.from_numpy(q.reshape(-1, ts).copy())
        d = dequantize_functions[t](blocks, bs, ts)
        ref = gguf.quants.dequantize(q, t).reshape(-1)
        dd = d.reshape(-1).float().numpy()
        res[name] = {"diffusers_dtype": str(d.dtype), "equal_to_gguf_py": bool(np.array_equal(dd, ref)),
                     "max_abs_diff": float(np.max(np.abs(dd - ref)))}
    return res


def main() -> None:
    _common.deterministic(0)
    import gguf
    from gguf import GGMLQuantizationType as T
    from gguf.constants import GGML_QUANT_SIZES
    import ggml  # noqa: F401  (fail early when the package is missing)
    import torch

    out = _common.fresh_dir(OUT)
    rng = np.random.default_rng(1234)

    deq = {}
    for name in TYPES:
        t = T[name]
        blocks = random_blocks(rng, name, t)
        with np.errstate(all="ignore"):
            y = gguf.quants.dequantize(blocks, t).astype(np.float32).reshape(-1)
        deq[f"{name}.blocks"] = torch.from_numpy(blocks.copy())
        deq[f"{name}.out"] = torch.from_numpy(y.copy())
    _common.save_tensors(out / "dequantize.safetensors", deq)

    x, case_names = quant_cases(rng)
    quant = {"x": torch.from_numpy(x.copy())}
    gguf_py_quantizes, gguf_py_agrees = [], {}
    for name in TYPES:
        t = T[name]
        q = ggml_quantize(x, t)
        try:
            with np.errstate(all="ignore"):
                qp = gguf.quants.quantize(x, t)
            gguf_py_quantizes.append(name)
            qp = np.ascontiguousarray(qp).view(np.uint8).reshape(q.shape)
            gguf_py_agrees[name] = bool(np.array_equal(qp, q))
        except NotImplementedError:
            pass
        quant[f"{name}.q"] = torch.from_numpy(np.ascontiguousarray(q))
    _common.save_tensors(out / "quantize.safetensors", quant)

    expected = {
        "packages": {"gguf": gguf.__version__ if hasattr(gguf, "__version__") else "0.19.0",
                     "ggml-python": "0.0.45"},
        "types": {name: {"id": int(T[name]), "block_size": GGML_QUANT_SIZES[T[name]][0],
                         "type_size": GGML_QUANT_SIZES[T[name]][1]} for name in TYPES},
        "gguf_py_quantizes": gguf_py_quantizes,
        "gguf_py_agrees_with_ggml": gguf_py_agrees,
        "quantize_row_cases": case_names,
        "row_elements": ROW,
        "diffusers_dequantize": diffusers_dequant_finding(),
    }
    _common.write_json(out / "expected.json", expected)
    print(f"[make_quant_gguf] wrote {out} ({_common.dir_size(out) / 1e3:.0f} kB); gguf-py quantizes "
          f"{gguf_py_quantizes}, agrees with ggml: {gguf_py_agrees}")


if __name__ == "__main__":
    main()
