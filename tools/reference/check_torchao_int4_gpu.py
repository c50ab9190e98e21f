"""The real torchao int4 weight-only forward on a CUDA GPU against diffq (not a make_ script: it needs a GPU,
torchao and mslk, so it runs in scripts/device-check.sh, part torchao_int4, on the lent GPU machine).

torchao 0.18's Int4WeightOnlyConfig (plain packing: Int4Tensor) quantizes with mslk's int4_row_quantize_zp /
pack_int4 and multiplies with mslk's bf16i4bf16_rowwise kernel, both CUDA only. The committed int4 fixtures
are therefore made on the CPU with a torch port of mslk's quantizer (make_quant_torchao.py), and diffq's
int4 path has never been compared with torchao's own forward. This script does that, per case of
tests/fixtures/quant/torchao/int4_gpu/ (inputs.safetensors, cases.json):
  * nn.Linear(K, N, bias, bf16, cuda) with the case's weight and bias, quantize_(linear,
    Int4WeightOnlyConfig(group_size)) -> must be an Int4Tensor; its qdata / scale / zero_point are compared
    bit for bit with the port's (which diffq equals bit for bit, tests/quant/test_torchao_int4_gpu_check.cpp);
  * y = linear(x) on the GPU (torchao's forward: the mslk kernel, then + bias) against diffq's output
    (tests/fixtures/quant/torchao/written/int4_gpu_diffq.safetensors): max |d| / max |y|, bound 1e-2 (bf16).
    Also reported: the same against F.linear(x, dequantized weight) in float32 on the GPU.
Writes <out>/torchao_int4.json (verdict, per case figures, versions) and <out>/torchao_int4_gpu.safetensors
(torchao's GPU quantization and outputs, so a session can commit them as a fixture).

mslk's Hopper bf16i4bf16 kernel builds TMA descriptors that need 16-byte global strides: a 7-wide bf16 row
(14 bytes) fails with "Failed to initialize the TMA descriptor" and the illegal-instruction error that
follows poisons the CUDA context for the rest of the process (seen on the H200, 2026-12-04). So:
  * the GEMM runs on a problem padded to multiples of 8: activation rows M (the x rows, batch dims
    flattened) and output features N (zero weight rows, zero bias). A linear's rows are independent and
    the quantization is per output row, so the first M x N of the padded result and the first N rows of
    the padded quantization are the unpadded problem's (the case records the padding it used);
  * each case runs in a process of its own (this script with --case NAME, --case-timeout seconds), so a
    case that kills its CUDA context reports itself and leaves the others their own.

Exit status: 0 every case agrees; 1 a disagreement or a case that failed to run; 3 unavailable (no CUDA,
torchao or mslk missing / not loadable).
Run: python3 tools/reference/check_torchao_int4_gpu.py --out DIR [--case NAME] [--case-timeout 120]
     tools/.venv/bin/python tools/reference/check_torchao_int4_gpu.py --out /tmp/x --device cpu --cpu-shims
       (exercises the script without a GPU: quantization through make_quant_torchao's CPU port, which must
       then equal the fixture; the forward fails, mslk's kernel being CUDA only, and the verdict says so)
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures" / "quant" / "torchao"
BOUND = 1e-2
ALIGN = 8  # rows / features padded to a multiple of this: 8 bf16 = 16 bytes, a TMA stride's granule


def rel(a, b) -> float:
    a, b = a.double(), b.double()
    return float((a - b).abs().max() / b.abs().max().clamp(min=1e-30))


def dequantize(t):
    """Int4Tensor [N, K] -> float32: q (low nibble = even column) * scale + zero (make_quant_torchao's)."""
    import torch

    packed = t.qdata
    low = torch.bitwise_right_shift(torch.bitwise_left_shift(packed, 4), 4)
    high = torch.bitwise_right_shift(packed, 4)
    q = torch.stack([low, high], dim=-1).reshape(packed.shape[0], -1).to(torch.float32)
    g = t.block_size[-1]
    scale = t.scale.t().to(torch.float32).repeat_interleave(g, dim=1)
    zero = t.zero_point.t().to(torch.float32).repeat_interleave(g, dim=1)
    return q * scale + zero


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--cpu-shims", action="store_true", help="quantize with make_quant_torchao's CPU port of mslk")
    ap.add_argument("--case", help="run this case alone, in this process (the parent runs each case so)")
    ap.add_argument("--case-timeout", type=float, default=120, help="seconds a case's process may take")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result = {"ok": False, "bound": BOUND, "cases": {}}

    def finish(code: int, why: str = "") -> int:
        result["status"] = {0: "ok", 1: "failed", 3: "unavailable"}[code]
        if why:
            result["why"] = why
        (out / "torchao_int4.json").write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
        print(f"[torchao_int4] {result['status']}{': ' + why if why else ''}")
        return code

    try:
        import torch
        from safetensors.torch import load_file, save_file
    except Exception as e:  # noqa: BLE001
        return finish(3, f"torch/safetensors: {e}")
    result["torch"] = torch.__version__
    if args.device == "cuda":
        if not torch.cuda.is_available():
            return finish(3, "torch sees no CUDA device")
        result["device"] = torch.cuda.get_device_name(0)
    else:
        result["device"] = args.device
    try:
        import torchao
        from torchao.quantization import Int4WeightOnlyConfig, quantize_
        from torchao.quantization.quantize_.workflows.int4 import int4_tensor as i4

        result["torchao"] = torchao.__version__
    except Exception as e:  # noqa: BLE001
        return finish(3, f"torchao: {type(e).__name__}: {e}")
    if args.cpu_shims:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from make_quant_torchao import install_cpu_shims

        install_cpu_shims()
        result["mslk"] = "CPU port (make_quant_torchao.install_cpu_shims): not torchao's own code"
    else:
        try:
            import mslk  # noqa: F401
        except Exception as e:  # noqa: BLE001
            return finish(3, f"mslk: {type(e).__name__}: {e}")
        try:
            from importlib.metadata import version

            result["mslk"] = version("mslk-cuda")
        except Exception:  # noqa: BLE001
            result["mslk"] = getattr(sys.modules["mslk"], "__version__", "?")
    if i4.int4_row_quantize_zp is None:
        return finish(3, "torchao could not import mslk.quantize.shuffle (int4_row_quantize_zp)")

    cases = json.loads((FIX / "int4_gpu" / "cases.json").read_text())
    if args.case:  # the child: one case, its figures and tensors to <out>/case-<name>.*
        if args.case not in cases:
            return finish(1, f"no case {args.case!r} in int4_gpu/cases.json")
        r, saved = run_case(args.case, cases[args.case], args.device, torch, load_file)
        if saved:
            save_file(saved, str(out / f"case-{args.case}.safetensors"))
        (out / f"case-{args.case}.json").write_text(json.dumps(r, sort_keys=True) + "\n")
        return 0 if r["ok"] else 1

    # The parent: every case in a process of its own (see the docstring: one kernel fault poisons a context).
    saved, ok = {}, True
    for name in sorted(cases):
        cmd = [sys.executable, str(Path(__file__).resolve()), "--out", str(out), "--device", args.device,
               "--case", name] + (["--cpu-shims"] if args.cpu_shims else [])
        case_json, case_st = out / f"case-{name}.json", out / f"case-{name}.safetensors"
        for f in (case_json, case_st):
            f.unlink(missing_ok=True)
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.case_timeout)
            rc, tail = p.returncode, (p.stdout + p.stderr)[-1500:]
        except subprocess.TimeoutExpired as e:
            rc, tail = "timeout", str(e)[-300:]
        if case_json.exists():
            r = json.loads(case_json.read_text())
            case_json.unlink()
        else:  # died before writing (a fault, a timeout): say how
            r = {"shape": cases[name]["shape"], "group_size": cases[name]["group_size"], "ok": False,
                 "error": f"the case's process ended without a result (exit {rc})", "output_tail": tail}
        r["process_exit"] = rc
        if case_st.exists():
            saved.update(load_file(str(case_st)))
            case_st.unlink()
        result["cases"][name] = r
        ok &= bool(r.get("ok"))
        print(f"[torchao_int4] {name}: {json.dumps({k: v for k, v in r.items() if k not in ('traceback', 'output_tail')})}",
              flush=True)
        if not r.get("ok") and (r.get("traceback") or r.get("output_tail")):
            print(r.get("traceback") or r.get("output_tail"), flush=True)
    if saved:
        save_file(saved, str(out / "torchao_int4_gpu.safetensors"))
    result["ok"] = ok
    return finish(0 if ok else 1)


def pad_to(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def run_case(name, c, device, torch, load_file):
    """One case: torchao's quantization and forward on a problem padded to multiples of ALIGN (rows of x,
    output features), sliced back. Returns (figures, tensors to save)."""
    from torchao.quantization import Int4WeightOnlyConfig, quantize_

    inputs = load_file(str(FIX / "int4_gpu" / "inputs.safetensors"))
    diffq = load_file(str(FIX / "written" / "int4_gpu_diffq.safetensors"))
    dev, bf16 = torch.device(device), torch.bfloat16
    r = {"shape": c["shape"], "group_size": c["group_size"]}
    saved = {}
    try:
        n, k = c["shape"]
        x = inputs[f"{name}.x"]
        lead, m = x.shape[:-1], x[..., 0].numel()
        n_pad, m_pad = pad_to(n), pad_to(m)
        r["padded"] = {"M": [m, m_pad], "N": [n, n_pad]}
        w = torch.zeros(n_pad, k, dtype=bf16)
        w[:n] = inputs[f"{name}.w"]
        bias = torch.zeros(n_pad, dtype=bf16)
        bias[:n] = inputs[f"{name}.bias"]
        lin = torch.nn.Linear(k, n_pad, bias=True, dtype=bf16, device=dev)
        with torch.no_grad():
            lin.weight.copy_(w)
            lin.bias.copy_(bias)
        quantize_(lin, Int4WeightOnlyConfig(group_size=c["group_size"]))
        qw = lin.weight
        r["class"] = type(qw).__name__
        same = {}
        for attr in ("qdata", "scale", "zero_point"):
            got = getattr(qw, attr).detach().cpu()
            got = got[:n] if attr == "qdata" else got[:, :n]  # qdata [N, K/2]; scale, zero_point [K/g, N]
            want = inputs[f"{name}.{attr}"]
            same[attr] = bool(got.dtype == want.dtype and got.shape == want.shape and torch.equal(got, want))
            saved[f"{name}.{attr}"] = got.contiguous()
        r["quantization_equals_port"] = same
        xp = torch.zeros(m_pad, k, dtype=bf16)
        xp[:m] = x.reshape(m, k)
        xp = xp.to(dev)
        with torch.no_grad():
            y = lin(xp)
            y_deq = torch.nn.functional.linear(xp.float(), dequantize(qw).to(dev), bias.to(dev).float())
        y = y.cpu()[:m, :n].reshape(*lead, n)
        y_deq = y_deq.cpu()[:m, :n].reshape(*lead, n)
        saved[f"{name}.y"] = y.contiguous()
        r["y_dtype"] = str(y.dtype)
        r["diffq_vs_torchao"] = rel(diffq[f"{name}.y"], y)
        r["diffq_vs_f32_deq_linear"] = rel(diffq[f"{name}.y"], y_deq)
        r["torchao_vs_f32_deq_linear"] = rel(y, y_deq)
        r["ok"] = (r["class"] == "Int4Tensor" and all(same.values()) and y.dtype == bf16
                   and r["diffq_vs_torchao"] <= BOUND)
    except Exception as e:  # noqa: BLE001
        r["ok"] = False
        r["error"] = f"{type(e).__name__}: {e}"
        r["traceback"] = traceback.format_exc(limit=4)
    return r, saved


if __name__ == "__main__":
    sys.exit(main())
