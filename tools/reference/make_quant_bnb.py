"""Writes tests/fixtures/quant/bnb/: what bitsandbytes 0.50.2 computes on the CPU (4-bit NF4/FP4 with and
without double quant, LLM.int8) and tiny FluxTransformer2DModels quantized by Diffusers'
BitsAndBytesConfig and saved with save_pretrained (safetensors).

Run: CUDA_VISIBLE_DEVICES= tools/.venv/bin/python tools/reference/make_quant_bnb.py

Files (this script never touches written/, which the C++ writer and check_bnb_written.py own):
  cases.safetensors / cases.json
    4-bit cases "<case>.{packed,absmax,nested_absmax,offset,deq}": bnb.functional.quantize_4bit of
      "in.<input>" (float32, cast to the case dtype by torch) and dequantize_4bit of the result (in the
      case dtype; stored in full for the "odd" input, every case has its sha256 in cases.json). Inputs have odd sizes (O*I not a multiple of the blocksize, odd in_features), an
      all-zero block, an all-zero trailing partial block, outliers and exact bucket-boundary ties.
    forward cases "<case>.{w,bias,x,y,packed,absmax,...}": bnb.nn.Linear4bit / Linear8bitLt built from
      the float weight on the CPU (quantized by .to("cpu")), eval mode, y = layer(x) under no_grad.
    int8 cases "<case>.{w,cb,scb,deq}": Int8Params quantization (weight -> float16 ->
      int8_vectorwise_quant) and int8_vectorwise_dequant.
  diffusers/<variant>/  config.json + diffusion_pytorch_model.safetensors: tests/fixtures/tiny-flux/
      transformer loaded by FluxTransformer2DModel.from_pretrained(quantization_config=..., torch_dtype=...)
      and saved with save_pretrained. Diffusers refuses bitsandbytes without a GPU
      (validate_environment) and maps the model to cuda:0 (update_device_map); both are patched to the
      CPU here, the quantization itself is bitsandbytes' own CPU code.
  diffusers/expected.json  per variant: the kwargs, torch_dtype, and per quantized weight the sha256 of
      bnb's dequantized bytes (4-bit: dequantize_4bit in quant_state.dtype; 8-bit:
      int8_vectorwise_dequant in float32), dtype and shape; the Linear modules left unquantized.

torch CPU capability and the lane count of torch's float sum (which decides nested_offset = mean(absmax)
bit for bit; 8 on x86, where torch registers no AVX-512 sum kernel) are recorded in cases.json.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # noqa: E402
import torch  # noqa: E402

OUT = _common.FIXTURES / "quant" / "bnb"
SOURCE = _common.FIXTURES / "tiny-flux" / "transformer"
# Passed to from_pretrained relative to the repository root: Diffusers saves it as "_name_or_path".
SOURCE_REL = "tests/fixtures/tiny-flux/transformer"
DT = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def dname(dt: torch.dtype) -> str:
    return str(dt).split(".")[1]


def sha256_tensor(t: torch.Tensor) -> str:
    t = t.detach().contiguous().cpu()
    data = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
    return hashlib.sha256(data).hexdigest()


def patch_diffusers_for_cpu() -> None:
    from diffusers.quantizers.bitsandbytes import bnb_quantizer as bq

    for cls in (bq.BnB4BitDiffusersQuantizer, bq.BnB8BitDiffusersQuantizer):
        cls.validate_environment = lambda self, *a, **k: None
        cls.update_device_map = lambda self, dm: {"": "cpu"} if dm is None else dm


# ---- inputs ----------------------------------------------------------------------------------------
def make_inputs(gen: torch.Generator) -> dict:
    import bitsandbytes.functional as F
    from bitsandbytes.backends.default.ops import _get_4bit_quantize_bounds

    odd = torch.randn(37, 65, generator=gen)            # n = 2405: odd in_features, partial last block
    odd[5, 7] = 40.0                                    # outlier
    odd.view(-1)[128:256] = 0.0                         # all-zero blocks (bs 32/64/128)
    odd.view(-1)[-37:] = 0.0                            # all-zero trailing partial block (bs 32, 64)
    even = torch.randn(24, 200, generator=gen) * 0.02   # n = 4800, K even, K % 64 != 0
    even[3, 11] = -0.9
    even.view(-1)[:64] = 0.0
    aligned = torch.randn(32, 128, generator=gen)       # n = 4096, K % 64 == 0
    # Block 0 (absmax exactly 1): every NF4/FP4 bucket boundary and its negation (ties of bucketize),
    # tiny values either side of FP4's +-0 codes, signed zeros.
    row = [1.0]
    for qt in ("nf4", "fp4"):
        bounds, _ = _get_4bit_quantize_bounds(qt, torch.device("cpu"))
        row += bounds.tolist()
    row += [-v for v in row[1:]]
    row += [1e-4, -1e-4, 2.6e-3, -2.6e-3, 0.0, -0.0]
    aligned.view(-1)[: len(row)] = torch.tensor(row, dtype=torch.float32)
    aligned.view(-1)[len(row):64] = 0.5
    big = torch.randn(3, 4608, generator=gen) * 3.0     # n = 13824: 3 blocks of 4096 + 1536
    big.view(-1)[4096:8192] = 0.0                       # one all-zero 4096 block
    big[0, 5] = -300.0
    del F
    return {"odd": odd, "even": even, "aligned": aligned, "big": big}


def quant4(tensors: dict, cases: dict, name: str, w: torch.Tensor, inp: str, qt: str, dt: torch.dtype, bs: int,
           dq: bool, storage: torch.dtype = torch.uint8, full_deq: bool = True) -> None:
    import bitsandbytes.functional as F

    a = w.to(dt)
    packed, st = F.quantize_4bit(a, blocksize=bs, compress_statistics=dq, quant_type=qt, quant_storage=storage)
    deq = F.dequantize_4bit(packed, st)
    assert deq.dtype == dt and tuple(deq.shape) == tuple(a.shape)
    tensors[f"{name}.packed"] = packed
    tensors[f"{name}.absmax"] = st.absmax
    if full_deq:
        tensors[f"{name}.deq"] = deq
    info = {"deq_sha256": sha256_tensor(deq), "input": inp, "quant_type": qt, "dtype": dname(dt), "blocksize": bs, "double_quant": dq,
            "quant_storage": dname(storage), "kind": "4bit",
            "quant_state": {k: v for k, v in st.as_dict().items() if not isinstance(v, torch.Tensor)}}
    if dq:
        tensors[f"{name}.nested_absmax"] = st.state2.absmax
        tensors[f"{name}.offset"] = st.offset.reshape(1)
        tensors["nested_quant_map"] = st.state2.code
    tensors[f"quant_map.{qt}"] = st.code
    cases[name] = info


def four_bit_cases(tensors: dict, cases: dict, inputs: dict) -> None:
    for inp in ("odd", "even", "aligned"):
        for qt in ("nf4", "fp4"):
            for dn, dt in DT.items():
                for dq in (False, True):
                    quant4(tensors, cases, f"q4.{inp}.{qt}.{dn}.bs64.dq{int(dq)}", inputs[inp], inp, qt, dt, 64, dq,
                           full_deq=inp == "odd")
    sweep = [("odd", "nf4", torch.bfloat16, True), ("big", "fp4", torch.float32, False),
             ("big", "nf4", torch.float16, True), ("even", "fp4", torch.bfloat16, True)]
    for bs in (32, 128, 256, 512, 1024, 2048, 4096):
        for inp, qt, dt, dq in sweep:
            quant4(tensors, cases, f"q4.{inp}.{qt}.{dname(dt)}.bs{bs}.dq{int(dq)}", inputs[inp], inp, qt, dt, bs, dq,
                   full_deq=False)
    # quant_storage other than uint8: the packed bytes viewed as bfloat16 ([n/4, 1]).
    quant4(tensors, cases, "q4.aligned.nf4.bfloat16.bs64.dq0.storage_bf16", inputs["aligned"], "aligned", "nf4",
           torch.bfloat16, 64, False, storage=torch.bfloat16)


def forward4_cases(tensors: dict, cases: dict, gen: torch.Generator) -> None:
    import bitsandbytes as bnb

    specs = [  # name, quant_type, double quant, weight dtype, compute dtype, x dtype, x shape, N
        ("fwd4.nf4_dq.wbf16.cf32.xbf16", "nf4", True, torch.bfloat16, torch.float32, torch.bfloat16, (2, 5, 96), 40),
        ("fwd4.nf4.wbf16.cbf16.xbf16", "nf4", False, torch.bfloat16, torch.bfloat16, torch.bfloat16, (6, 96), 40),
        ("fwd4.fp4_dq.wf16.cf16.xf32", "fp4", True, torch.float16, torch.float16, torch.float32, (7, 96), 40),
        ("fwd4.fp4.wf32.cf32.xf32.oddk", "fp4", False, torch.float32, torch.float32, torch.float32, (4, 75), 33),
        ("fwd4.nf4_dq.wf32.cbf16.xf32", "nf4", True, torch.float32, torch.bfloat16, torch.float32, (3, 96), 40),
        ("fwd4.nf4.wbf16.cf32.xf16", "nf4", False, torch.bfloat16, torch.float32, torch.float16, (3, 96), 40),
    ]
    for name, qt, dq, wdt, cdt, xdt, xshape, n_out in specs:
        k = xshape[-1]
        w = torch.randn(n_out, k, generator=gen) * 0.1
        b = torch.randn(n_out, generator=gen) * 0.1
        x = (torch.randn(*xshape, generator=gen)).to(xdt)
        lin = bnb.nn.Linear4bit(k, n_out, bias=True, compute_dtype=cdt, compress_statistics=dq, quant_type=qt)
        lin.weight = bnb.nn.Params4bit(w.to(wdt), requires_grad=False, compress_statistics=dq, quant_type=qt,
                                       module=lin)
        lin.bias = torch.nn.Parameter(b.clone(), requires_grad=False)
        lin = lin.to("cpu").eval()
        st = lin.weight.quant_state
        with torch.no_grad():
            y = lin(x)
        tensors[f"{name}.w"] = w
        tensors[f"{name}.bias"] = b
        tensors[f"{name}.x"] = x
        tensors[f"{name}.y"] = y
        tensors[f"{name}.packed"] = lin.weight.data
        tensors[f"{name}.absmax"] = st.absmax
        if dq:
            tensors[f"{name}.nested_absmax"] = st.state2.absmax
            tensors[f"{name}.offset"] = st.offset.reshape(1)
        cases[name] = {"kind": "forward4", "quant_type": qt, "double_quant": dq, "dtype": dname(wdt),
                       "compute_dtype": dname(cdt), "x_dtype": dname(xdt), "blocksize": 64}


def int8_cases(tensors: dict, cases: dict, gen: torch.Generator) -> None:
    import bitsandbytes as bnb
    import bitsandbytes.functional as F

    w = torch.randn(24, 50, generator=gen) * 0.3
    w[4] = 0.0            # all-zero row: SCB 0, codes 0
    w[7, 3] = 9.0         # row outlier
    w[9, :] = 1e-3        # tiny row
    for dn, dt in DT.items():
        a = w.to(dt)
        cb, scb, _ = F.int8_vectorwise_quant(a.contiguous().to(torch.float16))
        deq = F.int8_vectorwise_dequant(cb, scb)
        name = f"q8.{dn}"
        tensors[f"{name}.w"] = w
        tensors[f"{name}.cb"] = cb
        tensors[f"{name}.scb"] = scb
        tensors[f"{name}.deq"] = deq
        cases[name] = {"kind": "int8", "dtype": dn}

    specs = [  # name, weight dtype, x dtype, x shape, threshold, outlier positions (flat row, col)
        ("fwd8.f32.noout", torch.float32, torch.float32, (5, 64), 6.0, []),
        ("fwd8.f32.out", torch.float32, torch.float32, (2, 3, 64), 6.0, [(0, 3), (2, 3), (4, 17), (5, 63)]),
        ("fwd8.f16.out", torch.float16, torch.float16, (6, 64), 6.0, [(1, 0), (3, 40), (3, 41)]),
        ("fwd8.bf16.out", torch.bfloat16, torch.bfloat16, (6, 64), 6.0, [(0, 10), (5, 22)]),
        ("fwd8.f32.onerow", torch.float32, torch.float32, (1, 64), 6.0, [(0, 5)]),
        ("fwd8.f32.thr0", torch.float32, torch.float32, (4, 64), 0.0, [(1, 1)]),
        ("fwd8.f16.thr2_5", torch.float16, torch.float32, (4, 64), 2.5, []),
    ]
    for name, wdt, xdt, xshape, thr, outl in specs:
        k = xshape[-1]
        n_out = 24
        wt = torch.randn(n_out, k, generator=gen) * 0.2
        b = torch.randn(n_out, generator=gen) * 0.1
        x = torch.randn(*xshape, generator=gen).clamp(-3.0, 3.0)
        flat = x.view(-1, k)
        for i, (r, c) in enumerate(outl):
            flat[r, c] = (7.5 + 3 * i) * (-1) ** i
        x = x.to(xdt)
        lin = bnb.nn.Linear8bitLt(k, n_out, bias=True, has_fp16_weights=False, threshold=thr)
        lin.load_state_dict({"weight": wt.to(wdt), "bias": b.to(wdt)})
        lin = lin.to("cpu").eval()
        cb, scb = lin.weight.CB.clone(), lin.weight.SCB.clone()
        with torch.no_grad():
            y = lin(x)
        tensors[f"{name}.w"] = wt
        tensors[f"{name}.bias"] = b.to(wdt)
        tensors[f"{name}.x"] = x
        tensors[f"{name}.y"] = y
        tensors[f"{name}.cb"] = cb
        tensors[f"{name}.scb"] = scb
        cases[name] = {"kind": "forward8", "dtype": dname(wdt), "x_dtype": dname(xdt), "threshold": thr}


# ---- Diffusers save_pretrained -----------------------------------------------------------------------
VARIANTS = {
    "nf4_dq_bf16": (dict(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                         bnb_4bit_compute_dtype="bfloat16"), "bfloat16"),
    "fp4_f16_skip": (dict(load_in_4bit=True, bnb_4bit_quant_type="fp4",
                          llm_int8_skip_modules=["proj_out", "norm_out"]), "float16"),
    "int8_f16": (dict(load_in_8bit=True, llm_int8_skip_modules=["x_embedder"]), "float16"),
}


def diffusers_variants() -> dict:
    import bitsandbytes as bnb
    import bitsandbytes.functional as F
    from diffusers import BitsAndBytesConfig, FluxTransformer2DModel

    patch_diffusers_for_cpu()
    expected = {}
    root = OUT / "diffusers"
    for name, (kwargs, torch_dtype) in VARIANTS.items():
        model = FluxTransformer2DModel.from_pretrained(
            SOURCE_REL, quantization_config=BitsAndBytesConfig(**kwargs), torch_dtype=DT[torch_dtype])
        with tempfile.TemporaryDirectory() as tmp:
            model.save_pretrained(tmp)
            dst = root / name
            dst.mkdir(parents=True)
            for f in ("config.json", "diffusion_pytorch_model.safetensors"):
                shutil.copyfile(Path(tmp) / f, dst / f)
        weights, plain = {}, []
        for mname, mod in model.named_modules():
            if isinstance(mod, bnb.nn.Linear4bit):
                st = mod.weight.quant_state
                deq = F.dequantize_4bit(mod.weight.data, st)
                weights[f"{mname}.weight"] = {"kind": "4bit", "dtype": dname(deq.dtype),
                                              "shape": list(deq.shape), "sha256": sha256_tensor(deq)}
            elif isinstance(mod, bnb.nn.Linear8bitLt):
                scb = mod.weight.SCB if mod.weight.SCB is not None else mod.state.SCB
                deq = F.int8_vectorwise_dequant(mod.weight.data, scb)
                weights[f"{mname}.weight"] = {"kind": "int8", "dtype": dname(deq.dtype),
                                              "shape": list(deq.shape), "sha256": sha256_tensor(deq)}
            elif isinstance(mod, torch.nn.Linear):
                plain.append(mname)
        expected[name] = {"kwargs": kwargs, "torch_dtype": torch_dtype, "weights": weights, "plain_linear": plain}
    _common.write_json(root / "expected.json", expected)
    return expected


def main() -> None:
    _common.deterministic(0)
    os.chdir(_common.ROOT)
    import bitsandbytes

    OUT.mkdir(parents=True, exist_ok=True)
    for p in (OUT / "cases.safetensors", OUT / "cases.json"):
        if p.exists():
            p.unlink()
    if (OUT / "diffusers").exists():
        shutil.rmtree(OUT / "diffusers")

    gen = torch.Generator().manual_seed(1234)
    tensors: dict = {}
    cases: dict = {}
    inputs = make_inputs(gen)
    for k, v in inputs.items():
        tensors[f"in.{k}"] = v
    four_bit_cases(tensors, cases, inputs)
    forward4_cases(tensors, cases, gen)
    int8_cases(tensors, cases, gen)
    _common.save_tensors(OUT / "cases.safetensors", tensors)
    cap = torch.backends.cpu.get_cpu_capability()
    _common.write_json(OUT / "cases.json", {
        "generator": "tools/reference/make_quant_bnb.py",
        "versions": {"bitsandbytes": bitsandbytes.__version__, "torch": torch.__version__},
        "torch_cpu_capability": cap,
        # Vectorized<float> width of torch's sum kernel: 8 on x86 (no AVX-512 variant is registered).
        "torch_sum_lanes": 8 if platform.machine().lower() in ("x86_64", "amd64", "i686") else 4,
        "cases": cases,
    })
    diffusers_variants()
    print(f"wrote {OUT} ({_common.dir_size(OUT) / 1024:.0f} KiB)")


if __name__ == "__main__":
    main()
