"""Checks a FLUX transformer GGUF written by diffq (`diffq quantize --format gguf`) with the reference
stack and records the result under tests/fixtures/tiny-flux-gguf/:

  written_<type>_check.json     {"ok", "sha256", "command", "errors", "tensors": {name: {type, shape, ok}}}
  written_<type>_forward.safetensors   out_diffusers / out_f32_dequant, as make_flux_gguf.py computes them

(a) gguf-py's GGUFReader: every tensor's name (BFL naming, no prefix), ggml type (the documented rule:
    1-D or <= 1024 elements F32; rows not a whole number of blocks F16; else the chosen type), shape and
    bytes: the tiny-flux weights (cast to --dtype) converted to BFL naming (fused qkv / linear1,
    swapped adaLN halves) and quantized here by ggml (ggml-python) / numpy.
(b) Diffusers' FluxTransformer2DModel.from_single_file(file, quantization_config=GGUFQuantizationConfig())
    loads it on the CPU; its output on the tiny inputs is stored for tests/models/test_flux_gguf.cpp,
    which runs diffq on the same file (rewritten by diffq, sha256 checked) and compares.

Run (after building diffq):
  build/apps/cli/diffq quantize -m tests/fixtures/tiny-flux -o /tmp/w.gguf --format gguf --type q8_0 --dtype float32
  tools/.venv/bin/python tools/reference/check_flux_gguf.py /tmp/w.gguf --type Q8_0 --dtype float32
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import FIXTURES, save_tensors, sha256_file, write_json  # noqa: E402
from make_flux_gguf import forward_both  # noqa: E402
from make_flux_single_file import PREFIX, to_bfl  # noqa: E402
from make_quant_gguf import ggml_quantize  # noqa: E402

SMALL = 1024  # city96's QUANTIZATION_THRESHOLD


def rule(shape: tuple, tname: str) -> str:
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as T

    if len(shape) <= 1 or int(np.prod(shape)) <= SMALL:
        return "F32"
    if shape[-1] % GGML_QUANT_SIZES[T[tname]][0]:
        return "F16"
    return tname


def encode(v: np.ndarray, tname: str) -> bytes:
    from gguf import GGMLQuantizationType as T

    if tname == "F32":
        return v.astype(np.float32).tobytes()
    if tname == "F16":
        return v.astype(np.float16).tobytes()
    return ggml_quantize(v.reshape(-1, v.shape[-1]), T[tname]).tobytes()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--type", required=True)
    ap.add_argument("--dtype", default="float32")
    args = ap.parse_args()
    import torch
    from gguf import GGUFReader
    from safetensors.torch import load_file

    src_dir = FIXTURES / "tiny-flux" / "transformer"
    cfg = json.loads((src_dir / "config.json").read_text())
    sd = {k: v.to(getattr(torch, args.dtype)) for k, v in
          load_file(str(src_dir / "diffusion_pytorch_model.safetensors")).items()}
    want = {k[len(PREFIX):]: v.float().numpy() for k, v in to_bfl(sd, cfg["num_layers"], cfg["num_single_layers"]).items()}

    errors, tensors = [], {}
    reader = GGUFReader(args.file)
    arch = reader.fields["general.architecture"].contents()
    if arch != "flux":
        errors.append(f"general.architecture {arch!r}")
    names = [t.name for t in reader.tensors]
    if sorted(names) != sorted(want):
        errors.append(f"tensor names differ: {sorted(set(names) ^ set(want))}")
    for t in reader.tensors:
        if t.name not in want:
            continue
        v = want[t.name]
        tname = rule(v.shape, args.type)
        shape = [int(d) for d in reversed(t.shape.tolist())]
        got = np.ascontiguousarray(t.data).view(np.uint8).tobytes()
        rec = {"type": t.tensor_type.name, "shape": shape, "type_ok": t.tensor_type.name == tname,
               "shape_ok": shape == list(v.shape), "bytes_ok": got == encode(v, tname)}
        rec["ok"] = rec["type_ok"] and rec["shape_ok"] and rec["bytes_ok"]
        if not rec["ok"]:
            errors.append(f"tensor {t.name}: {rec} (want {tname})")
        tensors[t.name] = rec

    ref = load_file(str(FIXTURES / "tiny-flux" / "reference" / "transformer_forward.safetensors"))
    inner = cfg["num_attention_heads"] * cfg["attention_head_dim"]
    outs = forward_both(Path(args.file), FIXTURES / "tiny-flux", inner, ref)
    tag = args.type.lower()
    out_dir = FIXTURES / "tiny-flux-gguf"
    save_tensors(out_dir / f"written_{tag}_forward.safetensors", outs)
    result = {"ok": not errors, "sha256": sha256_file(Path(args.file)), "errors": errors,
              "command": f"diffq quantize -m tests/fixtures/tiny-flux -o <file> --format gguf --type {args.type} "
                         f"--dtype {args.dtype}",
              "reader": "gguf-py GGUFReader; Diffusers FluxTransformer2DModel.from_single_file + GGUFQuantizationConfig",
              "tensors": tensors}
    write_json(out_dir / f"written_{tag}_check.json", result)
    print(f"[check_flux_gguf] {'ok' if not errors else 'FAILED'}: {len(tensors)} tensors, types "
          f"{sorted({r['type'] for r in tensors.values()})}; Diffusers loaded it (out_diffusers saved)")
    for e in errors:
        print("  ", e)
    sys.exit(0 if not errors else 1)


if __name__ == "__main__":
    main()
