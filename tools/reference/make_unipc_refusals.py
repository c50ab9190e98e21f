"""Which UniPCMultistepScheduler (flow path, WanPipeline's) configs break down at which step in Diffusers
0.42.1: bh1 or an order >= 2 update into the final sigma = 0 (lambda = inf) gives NaN latents, an order-3
solve there is singular (torch.linalg.solve raises), sigma_min's repeated last sigma gives NaN at order 3,
and the configs next to them that stay finite. crosscheck_wan.py found these; diffq refuses where Diffusers
yields NaN or raises (tests/pipelines/test_unipc_refusals.cpp).

Writes tests/fixtures/unipc-refusals/cases.json: per case the scheduler config, the step count and the
outcome of stepping with finite random model outputs: {"outcome": "ok"}, {"outcome": "nan", "step": k}
(the first step whose prev_sample has a non-finite value) or {"outcome": "raises", "step": k, "error": ...}.
"""
from __future__ import annotations

import _common

WAN = dict(prediction_type="flow_prediction", use_flow_sigmas=True, num_train_timesteps=1000, solver_order=2,
           solver_type="bh2", predict_x0=True, lower_order_final=True, final_sigmas_type="zero", flow_shift=3.0)
CASES = [
    ({}, [1, 2, 3, 8]),
    ({"solver_type": "bh1"}, [1, 2, 3, 8]),
    ({"solver_type": "bh1", "final_sigmas_type": "sigma_min"}, [1, 3, 8]),
    ({"lower_order_final": False}, [1, 2, 3, 7]),
    ({"lower_order_final": False, "final_sigmas_type": "sigma_min"}, [2, 6]),
    ({"lower_order_final": False, "solver_order": 3, "flow_shift": 5.0}, [2, 3, 6]),
    ({"lower_order_final": False, "solver_order": 3, "final_sigmas_type": "sigma_min"}, [3, 6]),
    ({"solver_order": 3, "final_sigmas_type": "sigma_min"}, [3, 6]),
    ({"lower_order_final": False, "disable_corrector": [0]}, [6]),
    ({"solver_order": 1, "lower_order_final": False}, [4]),
]


def outcome(cfg: dict, n: int, gen) -> dict:
    import torch
    from diffusers import UniPCMultistepScheduler

    s = UniPCMultistepScheduler(**cfg)
    s.set_timesteps(n)
    s.set_begin_index(0)
    shape = (1, 4, 2, 3, 3)
    x = torch.randn(shape, generator=gen)
    for i, t in enumerate(s.timesteps):
        mo = torch.randn(shape, generator=gen)
        try:
            x = s.step(mo, t, x, return_dict=False)[0]
        except Exception as e:  # noqa: BLE001
            return {"outcome": "raises", "step": i, "error": f"{type(e).__name__}: {str(e).splitlines()[0]}"}
        if not bool(x.isfinite().all()):
            return {"outcome": "nan", "step": i}
    return {"outcome": "ok"}


def main() -> None:
    _common.deterministic(0)
    import torch

    out = _common.fresh_dir(_common.FIXTURES / "unipc-refusals")
    gen = torch.Generator("cpu").manual_seed(0)
    cases = []
    for edit, steps in CASES:
        cfg = dict(WAN, **edit)
        for n in steps:
            cases.append({"config": cfg, "steps": n, **outcome(cfg, n, gen)})
    _common.write_json(out / "cases.json", cases)
    for c in cases:
        print({k: v for k, v in c.items() if k != "config"}, {k: c["config"][k] for k in ("solver_order", "solver_type",
              "lower_order_final", "final_sigmas_type")})


if __name__ == "__main__":
    main()
