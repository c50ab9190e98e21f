"""Checks the bitsandbytes folders diffq wrote (tests/fixtures/quant/bnb/written/<variant>/, made by
tests/quant/test_bnb_diffusers.cpp with DIFFQ_WRITE_BNB_FIXTURES=1) with the real libraries, and records
the result in tests/fixtures/quant/bnb/written/check_result.json.

Run: CUDA_VISIBLE_DEVICES= tools/.venv/bin/python tools/reference/check_bnb_written.py

Per variant (the kwargs and torch_dtype of tests/fixtures/quant/bnb/diffusers/expected.json):
  1. FluxTransformer2DModel.from_pretrained(written/<variant>) loads the folder through Diffusers'
     bitsandbytes quantizer (pre-quantized path: Params4bit.from_prequantized / Int8Params + SCB), with
     the config.json diffq wrote.
  2. The same model is quantized by Diffusers / bitsandbytes from tests/fixtures/tiny-flux/transformer.
  3. Every Linear4bit weight: dequantize_4bit of diffq's file == dequantize_4bit of bitsandbytes' own
     quantization, bit for bit, and the QuantState fields agree; every Linear8bitLt: int8 codes, SCB and
     int8_vectorwise_dequant equal; every other parameter and buffer equal.
  4. Both models run the tiny-flux reference forward (in.* of tiny-flux/reference/
     transformer_forward.safetensors, cast to torch_dtype) and give identical outputs.
  "ok" is true when every check of every variant passed; "files" holds the sha256 of the files checked.
Like make_quant_bnb.py, Diffusers' GPU-only checks (validate_environment, update_device_map) are patched
to the CPU.
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

BNB = _common.FIXTURES / "quant" / "bnb"
WRITTEN = BNB / "written"
SOURCE_REL = "tests/fixtures/tiny-flux/transformer"
FORWARD = _common.FIXTURES / "tiny-flux" / "reference" / "transformer_forward.safetensors"
DT = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def patch_diffusers_for_cpu() -> None:
    from diffusers.quantizers.bitsandbytes import bnb_quantizer as bq

    for cls in (bq.BnB4BitDiffusersQuantizer, bq.BnB8BitDiffusersQuantizer):
        cls.validate_environment = lambda self, *a, **k: None
        cls.update_device_map = lambda self, dm: {"": "cpu"} if dm is None else dm


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.reshape(-1).view(torch.uint8),
                                                                    b.reshape(-1).view(torch.uint8))


def check_variant(name: str, spec: dict) -> dict:
    import bitsandbytes as bnb
    import bitsandbytes.functional as F
    from diffusers import BitsAndBytesConfig, FluxTransformer2DModel
    from safetensors.torch import load_file

    dt = DT[spec["torch_dtype"]]
    folder = WRITTEN / name
    problems: list[str] = []
    ours = FluxTransformer2DModel.from_pretrained(str(folder.relative_to(_common.ROOT)), torch_dtype=dt).eval()
    ref = FluxTransformer2DModel.from_pretrained(
        SOURCE_REL, quantization_config=BitsAndBytesConfig(**spec["kwargs"]), torch_dtype=dt).eval()

    n4 = n8 = 0
    ref_modules = dict(ref.named_modules())
    for mname, mod in ours.named_modules():
        other = ref_modules.get(mname)
        if type(mod) is not type(other):
            problems.append(f"{mname}: {type(mod).__name__} vs bitsandbytes' {type(other).__name__}")
            continue
        if isinstance(mod, bnb.nn.Linear4bit):
            qa, qb = mod.weight.quant_state, other.weight.quant_state
            for f in ("quant_type", "blocksize", "dtype", "shape", "nested"):
                if getattr(qa, f) != getattr(qb, f):
                    problems.append(f"{mname}: quant_state.{f} {getattr(qa, f)} vs {getattr(qb, f)}")
            if not same(F.dequantize_4bit(mod.weight.data, qa), F.dequantize_4bit(other.weight.data, qb)):
                problems.append(f"{mname}: dequantize_4bit differs")
            if not same(mod.weight.data, other.weight.data):
                problems.append(f"{mname}: packed codes differ")
            n4 += 1
        elif isinstance(mod, bnb.nn.Linear8bitLt):
            cb_a, cb_b = mod.weight.data, other.weight.data
            scb_a = mod.weight.SCB if mod.weight.SCB is not None else mod.state.SCB
            scb_b = other.weight.SCB if other.weight.SCB is not None else other.state.SCB
            if not (same(cb_a, cb_b) and same(scb_a, scb_b)):
                problems.append(f"{mname}: int8 codes or SCB differ")
            if not same(F.int8_vectorwise_dequant(cb_a, scb_a), F.int8_vectorwise_dequant(cb_b, scb_b)):
                problems.append(f"{mname}: int8_vectorwise_dequant differs")
            n8 += 1
        for pname, p in list(mod.named_parameters(recurse=False)) + list(mod.named_buffers(recurse=False)):
            if isinstance(mod, (bnb.nn.Linear4bit, bnb.nn.Linear8bitLt)) and pname == "weight":
                continue
            q = dict(list(other.named_parameters(recurse=False)) + list(other.named_buffers(recurse=False))).get(pname)
            if q is None or not same(p.data, q.data):
                problems.append(f"{mname}.{pname} differs")

    inputs = load_file(str(FORWARD))
    kw = dict(hidden_states=inputs["in.hidden_states"].to(dt),
              encoder_hidden_states=inputs["in.encoder_hidden_states"].to(dt),
              pooled_projections=inputs["in.pooled_projections"].to(dt), timestep=inputs["in.timestep"].to(dt),
              guidance=inputs["in.guidance"].to(dt), txt_ids=inputs["in.txt_ids"], img_ids=inputs["in.img_ids"],
              return_dict=False)
    with torch.no_grad():
        ya = ours(**kw)[0]
        yb = ref(**kw)[0]
    forward_equal = same(ya, yb)
    if not forward_equal:
        problems.append(f"forward differs: max abs {float((ya.float() - yb.float()).abs().max())}")

    diffusers_file = BNB / "diffusers" / name / "diffusion_pytorch_model.safetensors"
    sha = {f: _common.sha256_file(folder / f) for f in ("config.json", "diffusion_pytorch_model.safetensors")}
    return {
        "ok": not problems and (n4 + n8) > 0,
        "problems": problems,
        "linear4bit_checked": n4,
        "linear8bit_checked": n8,
        "forward_equal": forward_equal,
        "identical_to_diffusers_file": sha["diffusion_pytorch_model.safetensors"] == _common.sha256_file(diffusers_file),
        "files": sha,
    }


def main() -> None:
    _common.deterministic(0)
    os.chdir(_common.ROOT)
    patch_diffusers_for_cpu()
    import bitsandbytes
    import diffusers

    expected = json.loads((BNB / "diffusers" / "expected.json").read_text())
    variants = {name: check_variant(name, spec) for name, spec in expected.items()}
    result = {
        "checked_by": "tools/reference/check_bnb_written.py",
        "versions": {"bitsandbytes": bitsandbytes.__version__, "diffusers": diffusers.__version__,
                     "torch": torch.__version__},
        "ok": all(v["ok"] for v in variants.values()),
        "variants": variants,
    }
    _common.write_json(WRITTEN / "check_result.json", result)
    for name, v in variants.items():
        print(f"{name}: {'ok' if v['ok'] else 'FAILED'} ({v['linear4bit_checked']} Linear4bit, "
              f"{v['linear8bit_checked']} Linear8bitLt, forward equal {v['forward_equal']}, "
              f"identical to Diffusers' file {v['identical_to_diffusers_file']})")
        for p in v["problems"]:
            print("   ", p)
    print("ok" if result["ok"] else "FAILED")
    sys.exit(0 if result["ok"] else 1)


if __name__ == "__main__":
    main()
