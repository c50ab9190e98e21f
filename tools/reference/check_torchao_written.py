"""Checks the torchao files diffq wrote (tests/fixtures/quant/torchao/written/, made by the C++ test
TorchaoWritten.CommittedFilesAreWhatSaveWrites with DIFFQ_WRITE_TORCHAO_FIXTURES=1) with the reference
stack, and writes written/check_result.json ({"ok", per file "ok"/"sha256"/"errors"}), which the C++ test
TorchaoWritten.TorchaoCheckedTheCurrentFiles compares with the files' current sha256.

Per "<name>.safetensors":
  * torchao's is_metadata_torchao() accepts the header metadata and unflatten_tensor_state_dict() (the
    function Diffusers' TorchAoHfQuantizer calls when loading) rebuilds every weight, nothing left over;
  * "<name>.config.json" parses with Diffusers' TorchAoConfig.from_dict (torchao config_from_dict);
  * every Linear of source.safetensors is quantized again with torchao's quantize_(nn.Linear, config)
    (what Diffusers does at from_pretrained): the same layers are quantized, with the same tensor class,
    bit-identical qdata/scale/zero_point, the same block_size/dtype attributes, the same dequantize(),
    and the same F.linear output where torchao runs it on the CPU; plain tensors are identical.

Run: CUDA_VISIBLE_DEVICES= tools/.venv/bin/python tools/reference/check_torchao_written.py
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # noqa: E402
import torch  # noqa: E402
from make_quant_torchao import install_cpu_shims, int4_dequantize  # noqa: E402

DIR = _common.FIXTURES / "quant" / "torchao" / "written"


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.is_floating_point:
        af, bf = a.float(), b.float()
        nan = torch.isnan(af) & torch.isnan(bf)
        return bool(torch.equal(torch.where(nan, 0, af), torch.where(nan, 0, bf)))
    return bool(torch.equal(a, b))


def dequant(t):
    return int4_dequantize(t) if type(t).__name__ == "Int4Tensor" else t.dequantize()


def check_file(name: str, source: dict) -> dict:
    import diffusers
    from diffusers import TorchAoConfig
    from safetensors import safe_open
    from safetensors.torch import load_file
    from torchao.prototype.safetensors.safetensors_support import unflatten_tensor_state_dict
    from torchao.prototype.safetensors.safetensors_utils import is_metadata_torchao
    from torchao.quantization import quantize_

    errors, checked = [], []
    path = DIR / f"{name}.safetensors"
    tensors = load_file(str(path))
    with safe_open(str(path), "pt") as f:
        metadata = f.metadata()
    if not is_metadata_torchao(metadata):
        errors.append("is_metadata_torchao() rejects the metadata")
    loaded, leftover = unflatten_tensor_state_dict(tensors, metadata)
    if leftover:
        errors.append(f"unflatten left tensors over: {sorted(leftover)}")
    cfg = TorchAoConfig.from_dict(json.loads((DIR / f"{name}.config.json").read_text())).quant_type
    gen = torch.Generator().manual_seed(0)
    for key, src in source.items():
        mod, param = key.rsplit(".", 1)
        if key not in loaded:
            errors.append(f"{key}: missing after unflatten")
            continue
        got = loaded[key]
        if not (param == "weight" and src.dim() == 2):
            if not same(got, src):
                errors.append(f"{key}: plain tensor differs")
            continue
        lin = torch.nn.Linear(src.shape[1], src.shape[0], bias=False, dtype=src.dtype)
        with torch.no_grad():
            lin.weight.copy_(src)
        quantize_(lin, cfg)
        ref = lin.weight
        rcls, gcls = type(ref).__name__, type(got).__name__
        if rcls in ("Parameter", "Tensor"):
            if gcls not in ("Parameter", "Tensor") or not same(got, src):
                errors.append(f"{key}: torchao leaves it unquantized, the file has {gcls}")
            continue
        if rcls != gcls:
            errors.append(f"{key}: class {gcls}, torchao makes {rcls}")
            continue
        names = list(ref.tensor_data_names) + list(getattr(ref, "optional_tensor_data_names", []))
        for attr in names:
            a, b = getattr(got, attr, None), getattr(ref, attr, None)
            if (a is None) != (b is None) or (a is not None and not same(a, b)):
                errors.append(f"{key}: {attr} differs from torchao's")
        if list(getattr(got, "block_size", None) or []) != list(getattr(ref, "block_size", None) or []):
            errors.append(f"{key}: block_size {got.block_size} != {ref.block_size}")
        if got.dtype != ref.dtype:
            errors.append(f"{key}: dtype {got.dtype} != {ref.dtype}")
        if not same(dequant(got), dequant(ref)):
            errors.append(f"{key}: dequantize() differs")
        if rcls != "Int4Tensor":  # mslk-only forward
            x = (torch.randn(3, src.shape[1], generator=gen) * 0.5).to(src.dtype)
            with torch.no_grad():
                if not same(torch.nn.functional.linear(x, got), torch.nn.functional.linear(x, ref)):
                    errors.append(f"{key}: F.linear differs")
        checked.append(f"{key}: {gcls}")
    return {"ok": not errors, "errors": errors, "checked": checked, "sha256": _common.sha256_file(path),
            "diffusers": diffusers.__version__}


def main():
    _common.deterministic(0)
    install_cpu_shims()
    import torchao
    from safetensors.torch import load_file

    source = load_file(str(DIR / "source.safetensors"))
    files = {}
    for cfg_path in sorted(DIR.glob("*.config.json")):
        name = cfg_path.name[: -len(".config.json")]
        files[f"{name}.safetensors"] = check_file(name, source)
    result = {"ok": bool(files) and all(f["ok"] for f in files.values()), "files": files,
              "torchao": torchao.__version__, "torch": torch.__version__}
    _common.write_json(DIR / "check_result.json", result)
    for name, f in files.items():
        print(f"[check_torchao_written] {name}: {'ok' if f['ok'] else 'FAILED'} {f['errors'][:3]}")
    sys.exit(0 if result["ok"] else 1)


if __name__ == "__main__":
    main()
