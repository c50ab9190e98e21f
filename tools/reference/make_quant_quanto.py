"""Writes tests/fixtures/quant/quanto/: what optimum-quanto 0.2.7 makes of Linear weights on the CPU (the
QLinear that Diffusers' QuantoConfig builds: qint8 / qfloat8 (e4m3fn) / qint4 / qint2 weights, frozen),
and tiny FluxTransformer2DModels quantized by Diffusers' QuantoConfig and saved with save_pretrained.

Run: CUDA_VISIBLE_DEVICES= tools/.venv/bin/python tools/reference/make_quant_quanto.py

Files:
  cases.safetensors / cases.json
    "in.<shape>" float32 weights (cast to the case dtype by torch); per case "<case>.sd.<key>" the QLinear's
    state_dict() entries ("weight._data", "weight._data._data", "weight._scale", "weight._shift",
    "input_scale", "output_scale"; no bias), and for input "a" (bfloat16 cases and every float8 case:
    its all-zero row dequantizes to NaN) "<case>.deq" = weight.dequantize().
    cases.json: qtype, dtype, the group size quanto chose, the weight subclass quanto built on the CPU
    (TinyGemmWeightQBitsTensor for bfloat16 int4 with group 128), and sha256 of every dequantize().
  diffusers/<variant>/  config.json + diffusion_pytorch_model.safetensors of tests/fixtures/tiny-flux/
    transformer loaded with FluxTransformer2DModel.from_pretrained(quantization_config=QuantoConfig(...),
    torch_dtype=...) and saved with save_pretrained.
  diffusers/expected.json  per variant: kwargs, torch_dtype, per quantized Linear its qtype, group size,
    sha256 of weight.dequantize(), shape; the Linear modules left unquantized.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # noqa: E402
import torch  # noqa: E402

OUT = _common.FIXTURES / "quant" / "quanto"
SOURCE_REL = "tests/fixtures/tiny-flux/transformer"  # relative to the root: saved as "_name_or_path"
DT = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
QTYPES = ("int8", "float8", "int4", "int2")


def dname(dt: torch.dtype) -> str:
    return str(dt).split(".")[1]


def sha256_tensor(t: torch.Tensor) -> str:
    t = t.detach().contiguous().cpu()
    data = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
    return hashlib.sha256(data).hexdigest()


def qtype_of(name: str):
    from optimum.quanto import qfloat8, qint2, qint4, qint8

    return {"float8": qfloat8, "int8": qint8, "int4": qint4, "int2": qint2}[name]


def make_inputs(gen: torch.Generator) -> dict:
    a = torch.randn(37, 100, generator=gen)      # in <= 128: per-row (no groups) for int4/int2
    a[3] = 0.0                                   # an all-zero row
    a[5, 9] = 25.0                               # an outlier
    b = torch.randn(20, 192, generator=gen) * 0.05  # group 96
    b[7, 100:] = 0.3                             # constant tail groups
    c = torch.randn(48, 256, generator=gen)      # group 128 (bfloat16 int4: tinygemm packing on the CPU)
    d = torch.randn(6, 130, generator=gen) * 4.0  # in > 128 with no divisor in 128..32: no groups
    return {"a": a, "b": b, "c": c, "d": d}


def unit_cases(tensors: dict, cases: dict, inputs: dict) -> None:
    from optimum.quanto import QLinear

    for shape_name, w in inputs.items():
        tensors[f"in.{shape_name}"] = w
        for dn, dt in DT.items():
            for qn in QTYPES:
                name = f"{qn}.{dn}.{shape_name}"
                lin = torch.nn.Linear(w.shape[1], w.shape[0], bias=False, dtype=dt)
                with torch.no_grad():
                    lin.weight.copy_(w.to(dt))
                q = QLinear.from_module(lin, weights=qtype_of(qn))
                q.freeze()
                sd = q.state_dict()
                for k, v in sd.items():
                    tensors[f"{name}.sd.{k}"] = v
                deq = q.weight.dequantize()
                if shape_name == "a" and (dt == torch.bfloat16 or qn == "float8"):
                    tensors[f"{name}.deq"] = deq
                cases[name] = {"qtype": qn, "dtype": dn, "input": shape_name, "group_size": q.weight_group_size,
                               "weight_class": type(q.weight).__name__, "keys": sorted(sd.keys()),
                               "deq_sha256": sha256_tensor(deq), "deq_dtype": dname(deq.dtype)}


VARIANTS = {
    "int4_bf16": (dict(weights_dtype="int4", modules_to_not_convert=["proj_out"]), "bfloat16"),
    "int2_f32": (dict(weights_dtype="int2"), "float32"),
    "float8_f16": (dict(weights_dtype="float8", modules_to_not_convert=["x_embedder", "linear_1"]), "float16"),
    "int8_bf16": (dict(weights_dtype="int8"), "bfloat16"),
}


def diffusers_variants() -> None:
    from diffusers import FluxTransformer2DModel, QuantoConfig
    from optimum.quanto import QLinear

    expected = {}
    root = OUT / "diffusers"
    for name, (kwargs, torch_dtype) in VARIANTS.items():
        model = FluxTransformer2DModel.from_pretrained(
            SOURCE_REL, quantization_config=QuantoConfig(**kwargs), torch_dtype=DT[torch_dtype])
        with tempfile.TemporaryDirectory() as tmp:
            model.save_pretrained(tmp)
            dst = root / name
            dst.mkdir(parents=True)
            for f in ("config.json", "diffusion_pytorch_model.safetensors"):
                shutil.copyfile(Path(tmp) / f, dst / f)
        weights, plain = {}, []
        for mname, mod in model.named_modules():
            if isinstance(mod, QLinear):
                deq = mod.weight.dequantize()
                weights[f"{mname}.weight"] = {"qtype": kwargs["weights_dtype"], "group_size": mod.weight_group_size,
                                              "shape": list(deq.shape), "dtype": dname(deq.dtype),
                                              "weight_class": type(mod.weight).__name__,
                                              "sha256": sha256_tensor(deq)}
            elif isinstance(mod, torch.nn.Linear):
                plain.append(mname)
        expected[name] = {"kwargs": kwargs, "torch_dtype": torch_dtype, "weights": weights, "plain_linear": plain}
    _common.write_json(root / "expected.json", expected)


def main() -> None:
    _common.deterministic(0)
    os.chdir(_common.ROOT)
    import optimum.quanto as oq  # noqa: F401
    from importlib.metadata import version

    out = _common.fresh_dir(OUT)
    gen = torch.Generator().manual_seed(4321)
    tensors: dict = {}
    cases: dict = {}
    unit_cases(tensors, cases, make_inputs(gen))
    _common.save_tensors(out / "cases.safetensors", tensors)
    _common.write_json(out / "cases.json", {
        "generator": "tools/reference/make_quant_quanto.py",
        "versions": {"optimum-quanto": version("optimum-quanto"), "torch": torch.__version__},
        "cases": cases,
    })
    diffusers_variants()
    print(f"wrote {OUT} ({_common.dir_size(OUT) / 1024:.0f} KiB)")


if __name__ == "__main__":
    main()
