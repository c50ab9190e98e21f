"""Writes tests/fixtures/quant/torchao/: what torchao 0.18 (configs version 2) makes of small weights on
the CPU, and a tiny FluxTransformer2DModel quantized by Diffusers' TorchAoConfig and saved with
save_pretrained(safe_serialization=True).

Run: CUDA_VISIBLE_DEVICES= tools/.venv/bin/python tools/reference/make_quant_torchao.py

Files:
  schemes.safetensors  per case "<case>.w" (the float weight) and the torchao tensor's own attributes
                       "<case>.qdata" / ".scale" / ".zero_point", "<case>.deq" (its dequantize() in the
                       weight dtype), and for cases whose F.linear runs on the CPU "<case>.x", ".bias",
                       ".y" (F.linear through the tensor subclass).
  schemes.json         per case: the config (torchao config_to_dict), weight dtype/shape, tensor class,
                       which entries exist.
  diffusers/<name>/transformer/  FluxTransformer2DModel (1 double + 1 single block, bf16) quantized at
                       from_pretrained by TorchAoConfig(<config>) and saved by save_pretrained
                       (safetensors + "tensor_names" metadata, config.json with quant_type).
  diffusers/expected.json  per folder and weight key: torchao's dequantize() bytes as FNV-1a 64, the
                       tensor class, dtype and shape; plain (unquantized) keys listed too.

  int4_gpu/inputs.safetensors, int4_gpu/cases.json
                       inputs of the GPU device check of Int4WeightOnlyConfig (scripts/device-check.sh,
                       part torchao_int4; tools/reference/check_torchao_int4_gpu.py): per case a bf16
                       weight "<case>.w", bias ".bias", input ".x" [2, 5, K] (a zero token, an outlier)
                       and what the CPU port below makes of the weight (".qdata", ".scale",
                       ".zero_point"). No output: torchao's int4 forward is an mslk CUDA kernel.
                       diffq's output for these inputs is written by the C++ test
                       TorchaoInt4GpuCheck.CommittedDiffqOutputIsCurrent (DIFFQ_WRITE_TORCHAO_FIXTURES=1)
                       to written/int4_gpu_diffq.safetensors.

Two things torchao 0.18 cannot do on this CPU-only machine, and how the script gets them anyway:
  * Int4WeightOnlyConfig's plain Int4Tensor quantizes with mslk's int4_row_quantize_zp / pack_int4
    (a CUDA package). The script installs a torch re-implementation of their math (below, written
    from mslk/fbgemm's published formulas) into torchao's int4_tensor module, so quantize_() and
    Diffusers build a real Int4Tensor. Int4Tensor has no dequantize() in torchao 0.18; "<case>.deq"
    is q * scale + zero_point in float32 (bf16 scale/zero widened), rounded to the weight dtype once.
  * Float8DynamicActivationFloat8WeightConfig refuses to run without an SM89 GPU
    (_check_hardware_support); the check is disabled here. Quantization and the CPU _scaled_mm
    forward are torchao's own code.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # noqa: E402
import torch  # noqa: E402

OUT = _common.FIXTURES / "quant" / "torchao"


def fnv1a64(data: bytes) -> str:
    h = 0xCBF29CE484222325
    for b in data:
        h ^= b
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def tensor_bytes(t: torch.Tensor) -> bytes:
    t = t.detach().contiguous()
    return t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""


# ---- mslk's int4 row quantization (asymmetric, zero point in the float domain), as torch ops ------
def _int4_row_quantize_zp(x: torch.Tensor, group_size: int = 128):
    rows = x.shape[0]
    g = x.to(torch.float32).reshape(-1, group_size)
    hi = g.amax(dim=1, keepdim=True)
    lo = g.amin(dim=1, keepdim=True)
    scale = (hi - lo).clamp(min=1e-6) / 15
    zero = lo + scale * 8
    q = g.sub(lo).div(scale).round().clamp_(0, 15)
    q = (q - 8).to(torch.int8).reshape(x.shape)
    return q, scale.view(rows, -1).t().contiguous(), zero.view(rows, -1).t().contiguous()


def _pack_int4(q: torch.Tensor) -> torch.Tensor:
    low = torch.bitwise_and(q[:, ::2], 0xF)
    high = torch.bitwise_left_shift(q[:, 1::2], 4)
    return torch.bitwise_or(low, high).contiguous()


def sort_metadata_in_place(path: Path):
    """The Rust safetensors writer emits __metadata__ keys in HashMap (random) order; rewrite the
    header with sorted metadata keys (same length, same tensors and offsets) so fixtures are stable."""
    raw = path.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + n])
    md = header.pop("__metadata__", None)
    out = {}
    if md is not None:
        out["__metadata__"] = dict(sorted(md.items()))
    out.update(header)
    text = json.dumps(out, separators=(",", ":"), ensure_ascii=False).encode()
    assert len(text) <= n, (len(text), n)
    path.write_bytes(raw[:8] + text + b" " * (n - len(text)) + raw[8 + n :])


def install_cpu_shims():
    import importlib

    qa = importlib.import_module("torchao.quantization.quant_api")
    i4 = importlib.import_module("torchao.quantization.quantize_.workflows.int4.int4_tensor")

    i4.int4_row_quantize_zp = _int4_row_quantize_zp
    i4.pack_int4 = _pack_int4
    qa._check_hardware_support = lambda granularity: None


def int4_dequantize(t) -> torch.Tensor:
    """Int4Tensor [N, K]: q (low nibble = even column) * scale + zero, scale/zero [K/g, N]."""
    packed = t.qdata
    low = torch.bitwise_right_shift(torch.bitwise_left_shift(packed, 4), 4)
    high = torch.bitwise_right_shift(packed, 4)
    q = torch.stack([low, high], dim=-1).reshape(packed.shape[0], -1).to(torch.float32)
    g = t.block_size[-1]
    scale = t.scale.t().to(torch.float32).repeat_interleave(g, dim=1)
    zero = t.zero_point.t().to(torch.float32).repeat_interleave(g, dim=1)
    return (q * scale + zero).to(t.dtype)


def make_weight(n: int, k: int, dtype: torch.dtype, gen: torch.Generator, group: int = 32) -> torch.Tensor:
    """Random rows plus the cases that break naive ports: an all-zero row, a zero group, outliers,
    an all-positive row, a constant row, an all-negative row, tiny values."""
    w = torch.randn(n, k, generator=gen) * 0.05
    w[0] = 0.0
    if n > 1:
        w[1, 3] = 8.0
    if n > 2:
        w[2, group : 2 * group] = 0.0
    if n > 3:
        w[3] = w[3].abs() + 0.01
    if n > 4:
        w[4] = 0.3
    if n > 5:
        w[5] = -w[5].abs()
        w[5, k - 1] = -5.0
    if n > 6:
        w[6] *= 1e-4
    return w.to(dtype)


def scheme_cases():
    from torchao.quantization import (
        Float8DynamicActivationFloat8WeightConfig,
        Float8WeightOnlyConfig,
        Int4WeightOnlyConfig,
        Int8DynamicActivationInt8WeightConfig,
        Int8WeightOnlyConfig,
        IntxWeightOnlyConfig,
        MappingType,
    )
    from torchao.quantization.granularity import PerAxis, PerGroup, PerRow, PerTensor

    bf16, f32 = torch.bfloat16, torch.float32
    cases = []  # (name, config, dtype, N, K, run_linear)
    for dt, tag in ((bf16, "bf16"), (f32, "f32")):
        cases += [
            (f"int8wo_row_{tag}", Int8WeightOnlyConfig(), dt, 13, 96, True),
            (f"int8wo_tensor_{tag}", Int8WeightOnlyConfig(granularity=PerTensor()), dt, 13, 96, True),
            (f"int8wo_group32_{tag}", Int8WeightOnlyConfig(granularity=PerGroup(32)), dt, 13, 96, True),
            (f"float8wo_row_{tag}", Float8WeightOnlyConfig(), dt, 13, 96, True),
            (f"float8wo_tensor_{tag}", Float8WeightOnlyConfig(granularity=PerTensor()), dt, 13, 96, True),
            (f"float8dq_tensor_{tag}", Float8DynamicActivationFloat8WeightConfig(), dt, 16, 96, True),
            (f"int8dq_row_{tag}", Int8DynamicActivationInt8WeightConfig(), dt, 13, 96, True),
            (f"int8dq_tensor_{tag}", Int8DynamicActivationInt8WeightConfig(granularity=PerTensor()), dt, 13, 96, True),
            (f"int4_g32_{tag}", Int4WeightOnlyConfig(group_size=32), dt, 7, 96, False),
        ]
    cases.append(("float8dq_row_bf16", Float8DynamicActivationFloat8WeightConfig(granularity=PerRow()), bf16, 16, 96, True))
    for g in (64, 128, 256):
        cases.append((f"int4_g{g}_bf16", Int4WeightOnlyConfig(group_size=g), bf16, 7, 256, False))
    for bits in range(1, 9):
        tb = getattr(torch, f"int{bits}")
        cases.append((f"intx_int{bits}_axis0_bf16", IntxWeightOnlyConfig(weight_dtype=tb, granularity=PerAxis(0)), bf16, 9, 64, bits == 4))
        cases.append((f"intx_int{bits}_g32_bf16", IntxWeightOnlyConfig(weight_dtype=tb, granularity=PerGroup(32)), bf16, 9, 64, False))
    cases += [
        ("intx_int4_g32_f32", IntxWeightOnlyConfig(weight_dtype=torch.int4, granularity=PerGroup(32)), f32, 9, 64, True),
        ("intx_int4_g32_asym_bf16", IntxWeightOnlyConfig(weight_dtype=torch.int4, granularity=PerGroup(32), mapping_type=MappingType.ASYMMETRIC), bf16, 9, 64, True),
        ("intx_int8_axis0_asym_f32", IntxWeightOnlyConfig(weight_dtype=torch.int8, mapping_type=MappingType.ASYMMETRIC), f32, 9, 64, False),
        ("intx_int2_g32_f32", IntxWeightOnlyConfig(weight_dtype=torch.int2, granularity=PerGroup(32)), f32, 9, 64, False),
        ("intx_int4_g32_scalef32_bf16", IntxWeightOnlyConfig(weight_dtype=torch.int4, granularity=PerGroup(32), scale_dtype=torch.float32), bf16, 9, 64, False),
    ]
    return cases


def make_schemes(out: Path):
    from torchao.core.config import config_to_dict
    from torchao.quantization import quantize_

    gen = torch.Generator().manual_seed(1)
    tensors, info = {}, {}
    for name, cfg, dt, n, k, run_linear in scheme_cases():
        w = make_weight(n, k, dt, gen)
        lin = torch.nn.Linear(k, n, bias=True, dtype=dt)
        with torch.no_grad():
            lin.weight.copy_(w)
            lin.bias.copy_((torch.randn(n, generator=gen) * 0.1).to(dt))
        quantize_(lin, cfg)
        qw = lin.weight
        cls = type(qw).__name__
        entry = {"config": config_to_dict(cfg), "dtype": str(dt).split(".")[-1], "shape": [n, k], "class": cls}
        tensors[f"{name}.w"] = w
        for attr in ("qdata", "scale", "zero_point"):
            v = getattr(qw, attr, None)
            if isinstance(v, torch.Tensor):
                tensors[f"{name}.{attr}"] = v
        deq = int4_dequantize(qw) if cls == "Int4Tensor" else qw.dequantize()
        tensors[f"{name}.deq"] = deq
        entry["block_size"] = list(qw.block_size) if getattr(qw, "block_size", None) is not None else None
        if run_linear:
            x = (torch.randn(2, 5, k, generator=gen) * 0.5).to(dt)
            x[0, 0] = 0.0  # an all-zero token
            x[1, 2, 7] = 30.0  # an outlier token
            with torch.no_grad():
                y = torch.nn.functional.linear(x, qw, lin.bias)
            tensors[f"{name}.x"], tensors[f"{name}.bias"], tensors[f"{name}.y"] = x, lin.bias.detach(), y
        entry["linear"] = run_linear
        info[name] = entry
    _common.save_tensors(out / "schemes.safetensors", tensors)
    _common.write_json(out / "schemes.json", info)


# (case, N, K, group size): two weights of schemes.safetensors' int4 cases (7 rows: no multiple of 8) and
# two kernel-friendly shapes.
INT4_GPU_CASES = [("int4_g32_bf16", 7, 96, 32), ("int4_g128_bf16", 7, 256, 128),
                  ("n32_k256_g32", 32, 256, 32), ("n32_k256_g128", 32, 256, 128)]


def make_int4_gpu_inputs(out: Path):
    """Inputs of the GPU check of torchao's real int4 forward, with their own generator (seed 2) and run
    last, so that the other files keep their bytes. The int4_* weights are read back from
    schemes.safetensors (the same weights as those cases)."""
    from safetensors.torch import load_file
    from torchao.core.config import config_to_dict
    from torchao.quantization import Int4WeightOnlyConfig, quantize_

    schemes = load_file(str(out / "schemes.safetensors"))
    gen = torch.Generator().manual_seed(2)
    tensors, info = {}, {}
    for name, n, k, g in INT4_GPU_CASES:
        w = schemes[f"{name}.w"] if f"{name}.w" in schemes else make_weight(n, k, torch.bfloat16, gen, group=g)
        assert tuple(w.shape) == (n, k) and w.dtype == torch.bfloat16, name
        bias = (torch.randn(n, generator=gen) * 0.1).to(torch.bfloat16)
        x = (torch.randn(2, 5, k, generator=gen) * 0.5).to(torch.bfloat16)
        x[0, 0] = 0.0  # an all-zero token
        x[1, 2, 7] = 30.0  # an outlier token
        cfg = Int4WeightOnlyConfig(group_size=g)
        lin = torch.nn.Linear(k, n, bias=True, dtype=torch.bfloat16)
        with torch.no_grad():
            lin.weight.copy_(w)
            lin.bias.copy_(bias)
        quantize_(lin, cfg)  # the CPU port of mslk's quantizer (install_cpu_shims)
        qw = lin.weight
        assert type(qw).__name__ == "Int4Tensor", type(qw)
        tensors.update({f"{name}.w": w, f"{name}.bias": bias, f"{name}.x": x, f"{name}.qdata": qw.qdata,
                        f"{name}.scale": qw.scale, f"{name}.zero_point": qw.zero_point})
        info[name] = {"config": config_to_dict(cfg), "shape": [n, k], "group_size": g, "dtype": "bfloat16",
                      "x_shape": list(x.shape)}
    (out / "int4_gpu").mkdir()
    _common.save_tensors(out / "int4_gpu" / "inputs.safetensors", tensors)
    _common.write_json(out / "int4_gpu" / "cases.json", info)


def make_diffusers(out: Path):
    from diffusers import FluxTransformer2DModel, TorchAoConfig
    from safetensors import safe_open
    from torchao.quantization import (
        Float8DynamicActivationFloat8WeightConfig,
        Int4WeightOnlyConfig,
        Int8DynamicActivationInt8WeightConfig,
        Int8WeightOnlyConfig,
        IntxWeightOnlyConfig,
    )
    from torchao.quantization.granularity import PerGroup, PerRow

    base = FluxTransformer2DModel(patch_size=1, in_channels=16, num_layers=1, num_single_layers=1,
                                  attention_head_dim=16, num_attention_heads=2, joint_attention_dim=8,
                                  pooled_projection_dim=8, guidance_embeds=False, axes_dims_rope=(4, 6, 6))
    with torch.no_grad():
        for p in base.parameters():
            p.add_(torch.randn_like(p) * 0.02)
    configs = {
        "int8wo": Int8WeightOnlyConfig(),
        "int8dq": Int8DynamicActivationInt8WeightConfig(),
        "int4wo_g32": Int4WeightOnlyConfig(group_size=32),
        "float8dq_row": Float8DynamicActivationFloat8WeightConfig(granularity=PerRow()),
        "intx_int4_g8": IntxWeightOnlyConfig(weight_dtype=torch.int4, granularity=PerGroup(8)),
    }
    expected = {}
    with tempfile.TemporaryDirectory() as tmp:
        base.to(torch.bfloat16).save_pretrained(tmp, safe_serialization=True)
        for name, cfg in configs.items():
            model = FluxTransformer2DModel.from_pretrained(
                tmp, quantization_config=TorchAoConfig(cfg), torch_dtype=torch.bfloat16)
            folder = out / "diffusers" / name / "transformer"
            model.save_pretrained(folder, safe_serialization=True)
            files = sorted(p.name for p in folder.glob("*.safetensors"))
            for fname in files:
                sort_metadata_in_place(folder / fname)
            cfg_json = json.loads((folder / "config.json").read_text())
            cfg_json.pop("_name_or_path", None)  # a temp dir: would make the fixture non-deterministic
            _common.write_json(folder / "config.json", cfg_json)
            keys = {}
            for key, t in model.state_dict().items():
                cls = type(t).__name__
                if cls == "Int4Tensor":
                    deq = int4_dequantize(t)
                elif cls != "Tensor" and cls != "Parameter":
                    deq = t.dequantize()
                else:
                    deq = t.detach()
                keys[key] = {"class": cls, "dtype": str(deq.dtype).split(".")[-1], "shape": list(deq.shape),
                             "fnv1a64": fnv1a64(tensor_bytes(deq))}
            with safe_open(str(folder / files[0]), "pt") as f:
                md = f.metadata()
            expected[name] = {"files": files, "keys": keys, "metadata_keys": sorted(md.keys())}
    _common.write_json(out / "diffusers" / "expected.json", expected)


def main():
    _common.deterministic(0)
    install_cpu_shims()
    written = OUT / "written"
    keep = {}
    if written.exists():  # written/ is made by the C++ side (tests) and checked by check_torchao_written.py
        keep = {p.name: p.read_bytes() for p in written.iterdir() if p.is_file()}
    out = _common.fresh_dir(OUT)
    if keep:
        (out / "written").mkdir()
        for fname, data in keep.items():
            (out / "written" / fname).write_bytes(data)
    make_schemes(out)
    make_diffusers(out)
    with torch.random.fork_rng():  # nn.Linear's init draws from the global generator
        make_int4_gpu_inputs(out)
    print(f"[make_quant_torchao] {out}: {_common.dir_size(out) / 1024:.0f} KiB")


if __name__ == "__main__":
    main()
