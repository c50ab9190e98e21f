"""torch's scaled_dot_product_attention on the cases where "what does attention return" is a choice:
query rows whose every key is masked (additive -inf mask, boolean mask), no keys at all, and ordinary
rows next to them, in float32 and bfloat16. tests/ops/test_sdpa_torch.cpp checks diffq's CPU sdpa (and
the CUDA one, on a GPU) against these outputs. torch 2.15 returns 0 for a fully masked row (not NaN).

Writes tests/fixtures/ops/sdpa_masked.safetensors: per case `<case>.q/.k/.v[/.mask]` and `<case>.out`.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from _common import FIXTURES, deterministic, save_tensors


def main() -> None:
    deterministic(0)
    g = torch.Generator().manual_seed(1234)
    B, H, Sq, Sk, D = 2, 3, 7, 13, 16
    q = torch.randn(B, H, Sq, D, generator=g)
    k = torch.randn(B, H, Sk, D, generator=g)
    v = torch.randn(B, H, Sk, D, generator=g)
    add = torch.randn(B, 1, Sq, Sk, generator=g)
    add[:, :, 2, :] = float("-inf")           # row 2: every key masked
    add[1, :, 5, :] = float("-inf")           # row 5 of batch 1 too
    add[:, :, 3, ::2] = float("-inf")         # row 3: half the keys
    keep = torch.rand(B, H, Sq, Sk, generator=g) > 0.3
    keep[:, :, 4, :] = False                  # row 4: every key masked
    keep[0, 1, :, :] = False                  # a whole head masked
    keep[:, :, 0, :] = True
    out = {}
    for dt, tag in ((torch.float32, "f32"), (torch.bfloat16, "bf16")):
        qd, kd, vd = q.to(dt), k.to(dt), v.to(dt)
        cases = {
            f"additive_{tag}": dict(attn_mask=add.to(dt)),
            f"bool_{tag}": dict(attn_mask=keep),
        }
        for name, kw in cases.items():
            out[f"{name}.q"], out[f"{name}.k"], out[f"{name}.v"] = qd, kd, vd
            out[f"{name}.mask"] = kw["attn_mask"]
            out[f"{name}.out"] = F.scaled_dot_product_attention(qd, kd, vd, **kw)
        name = f"no_keys_{tag}"
        out[f"{name}.q"], out[f"{name}.k"], out[f"{name}.v"] = qd, kd[:, :, :0], vd[:, :, :0]
        out[f"{name}.out"] = F.scaled_dot_product_attention(qd, kd[:, :, :0], vd[:, :, :0])
    for name in ("additive_f32", "bool_f32"):
        assert torch.all(out[f"{name}.out"][:, :, 4 if name.startswith("bool") else 2] == 0), name
    dst = FIXTURES / "ops"
    dst.mkdir(parents=True, exist_ok=True)
    save_tensors(dst / "sdpa_masked.safetensors", {k: t.contiguous() for k, t in out.items()},
                 {"torch": torch.__version__})
    print("wrote", dst / "sdpa_masked.safetensors")


if __name__ == "__main__":
    main()
