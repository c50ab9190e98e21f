"""Checks tests/fixtures/quant/gguf/written.gguf, a GGUF file written by diffq (io::write_gguf, content
in tests/quant/gguf_written_recipe.h), with gguf-py's GGUFReader, and writes written_check.json next to
it: {"ok", "file", "sha256", "errors", "tensors": {name: ...}, "metadata": {key: ...}}.

Every tensor's type, shape and bytes and every metadata key's type and value are compared with the same
content rebuilt here: values from the recipe's integer formula; quantized tensors quantized by ggml
(ggml-python's ggml_quantize_chunk) and, where it can, by gguf-py (which must agree). So the file also
proves diffq's reference quantizers bit-exact inside a real GGUF file.

Run: tools/.venv/bin/python tools/reference/check_gguf_written.py   (after regenerating written.gguf)
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402
from make_quant_gguf import TYPES, ggml_quantize  # noqa: E402

DIR = _common.FIXTURES / "quant" / "gguf"
FILE = DIR / "written.gguf"
ALIGNMENT = 64


def recipe_values(n: int, seed: int) -> np.ndarray:
    i = np.arange(n, dtype=np.int64) + seed * 1000
    return (((i * 7919) % 257) - 128).astype(np.float32) / np.float32(64)


def expected_tensors():
    """name -> (type name, torch-order shape, bytes, source)."""
    import gguf
    from gguf import GGMLQuantizationType as T

    out = {}

    def plain(name, tname, shape, seed):
        v = recipe_values(int(np.prod(shape)), seed).reshape(shape)
        out[name] = (tname, list(shape), gguf.quants.quantize(v, T[tname]).tobytes(), "gguf-py")

    plain("token_embd.weight", "F32", (3, 5), 1)
    plain("norm.weight", "F16", (4, 8), 2)
    plain("vec.bias", "F32", (7,), 3)
    plain("cube.f32", "F32", (2, 3, 4), 4)
    plain("conv.weight", "F16", (2, 3, 1, 32), 5)
    for seed, tname in enumerate(TYPES, start=10):
        v = recipe_values(2 * 256, seed).reshape(2, 256)
        q = ggml_quantize(v, T[tname]).tobytes()
        source = "ggml"
        try:
            qp = np.ascontiguousarray(gguf.quants.quantize(v, T[tname])).view(np.uint8).tobytes()
            assert qp == q, f"gguf-py and ggml disagree on {tname}"
            source = "ggml+gguf-py"
        except NotImplementedError:
            pass
        out[f"blk.{tname.lower()}.weight"] = (tname, [2, 256], q, source)
    return out


def expected_metadata():
    """key -> (list of GGUFValueType names as GGUFReader reports them, value as contents() returns it)."""
    return {
        "general.architecture": (["STRING"], "diffq-test"),
        "general.name": (["STRING"], "written by diffq"),
        "general.alignment": (["UINT32"], ALIGNMENT),
        "test.u8": (["UINT8"], 200),
        "test.i8": (["INT8"], -100),
        "test.u16": (["UINT16"], 60000),
        "test.i16": (["INT16"], -30000),
        "test.u32": (["UINT32"], 4000000000),
        "test.i32": (["INT32"], -2000000000),
        "test.u64": (["UINT64"], 9223372036854775813),
        "test.i64": (["INT64"], -4611686018427387904),
        "test.f32": (["FLOAT32"], float(np.float32(0.1))),
        "test.f64": (["FLOAT64"], 0.1),
        "test.bool": (["BOOL"], True),
        "test.string": (["STRING"], "h\u00e9llo \u2713"),
        "test.empty_string": (["STRING"], ""),
        "test.arr_i32": (["ARRAY", "INT32"], [1, -2, 3]),
        "test.arr_f32": (["ARRAY", "FLOAT32"], [0.5, -1.25]),
        "test.arr_str": (["ARRAY", "STRING"], ["a", "bc", ""]),
        "test.arr_bool": (["ARRAY", "BOOL"], [True, False]),
        "test.arr_empty": (["ARRAY"], []),                         # element type checked below
        "test.arr_nested": (["ARRAY", "ARRAY", "INT32"], [1, 2, 3]),  # GGUFReader flattens nesting
    }


def main() -> None:
    from gguf import GGUFReader

    errors: list[str] = []
    reader = GGUFReader(str(FILE))
    if reader.alignment != ALIGNMENT:
        errors.append(f"alignment {reader.alignment} != {ALIGNMENT}")
    if reader.data_offset % ALIGNMENT:
        errors.append(f"data section at {reader.data_offset}, not aligned")
    version = reader.fields["GGUF.version"].parts[-1][0]
    if version != 3:
        errors.append(f"GGUF version {version}")

    want_t = expected_tensors()
    tensors = {}
    got_names = [t.name for t in reader.tensors]
    if got_names != list(want_t):
        errors.append(f"tensor names/order {got_names} != {list(want_t)}")
    for t in reader.tensors:
        if t.name not in want_t:
            continue
        tname, shape, data, source = want_t[t.name]
        got_shape = [int(d) for d in reversed(t.shape.tolist())]  # reader gives ggml order (ne)
        got = np.ascontiguousarray(t.data).view(np.uint8).tobytes()
        rec = {"type": t.tensor_type.name, "shape": got_shape, "n_bytes": int(t.n_bytes),
               "aligned": bool((int(t.data_offset) - int(reader.data_offset)) % ALIGNMENT == 0),
               "type_ok": t.tensor_type.name == tname, "shape_ok": got_shape == shape, "bytes_ok": got == data,
               "expected_from": source}
        rec["ok"] = rec["type_ok"] and rec["shape_ok"] and rec["bytes_ok"] and rec["aligned"]
        if not rec["ok"]:
            errors.append(f"tensor {t.name}: {rec}")
        tensors[t.name] = rec

    want_m = expected_metadata()
    metadata = {}
    keys = [k for k in reader.fields if not k.startswith("GGUF.")]
    if keys != list(want_m):
        errors.append(f"metadata keys/order {keys} != {list(want_m)}")
    for key in keys:
        if key not in want_m:
            continue
        field = reader.fields[key]
        types = [ty.name for ty in field.types]
        value = field.contents()
        want_types, want_value = want_m[key]
        ok = bool(types == want_types and value == want_value)
        if key == "test.arr_empty":
            ok = ok and int(field.parts[-2][0]) == 0 and int(field.parts[-1][0]) == 0  # uint8, 0 items
        metadata[key] = {"types": types, "value": value, "ok": ok}
        if not ok:
            errors.append(f"metadata {key}: got {types} {value!r}, want {want_types} {want_value!r}")

    result = {"ok": not errors, "file": FILE.name, "sha256": _common.sha256_file(FILE), "errors": errors,
              "reader": "gguf-py GGUFReader (gguf 0.19.0)", "tensors": tensors, "metadata": metadata}
    _common.write_json(DIR / "written_check.json", result)
    print(f"[check_gguf_written] {'ok' if not errors else 'FAILED'}: {len(tensors)} tensors, {len(metadata)} keys")
    for e in errors:
        print("  ", e)
    sys.exit(0 if not errors else 1)


if __name__ == "__main__":
    main()
