"""UniPCMultistepScheduler (Diffusers 0.42.1) on its flow path as WanPipeline uses it, plus the
FlowMatchEulerDiscreteScheduler(shift=7.0) schedule of Diffusers' tiny Wan tests.

Writes tests/fixtures/unipc/:
- cases.json: per case the scheduler config kwargs, the step counts, the dtypes of model_output / sample,
  optional set_timesteps extras (mu, sigmas).
- unipc.safetensors, per case and step count N ("<case>.n<N>."):
  sigmas (f32, N+1), timesteps (i64, N), lambdas (torch's float32 log(1 - sigma) - log(sigma) per sigma,
  computed on 0-dim tensors as UniPC does: MKL's vsLn), sample0, then per step i: mo<i> (the random model
  output fed to step) and prev<i> (Diffusers' prev_sample). Each step's sample is the previous prev.
- schedules.safetensors: UniPC Wan schedules (shift 3 / 5) for many N; "fme7.n<N>.sigmas/timesteps":
  FlowMatchEulerDiscreteScheduler(shift=7.0).set_timesteps(N) with no sigmas/mu (WanPipeline's call).
"""
from __future__ import annotations

import _common


def main() -> None:
    _common.deterministic(0)
    import torch
    from diffusers import FlowMatchEulerDiscreteScheduler, UniPCMultistepScheduler

    out = _common.fresh_dir(_common.FIXTURES / "unipc")
    wan = dict(prediction_type="flow_prediction", use_flow_sigmas=True, num_train_timesteps=1000,
               solver_order=2, solver_type="bh2", predict_x0=True, lower_order_final=True)
    f32, bf16 = torch.float32, torch.bfloat16
    cases = {
        "s3_bh2": (dict(wan, flow_shift=3.0), [1, 2, 3, 4, 5, 10, 50], f32, f32, {}),
        "s5_bh2": (dict(wan, flow_shift=5.0), [1, 2, 3, 4, 5, 10, 50], f32, f32, {}),
        "s5_bh1": (dict(wan, flow_shift=5.0, solver_type="bh1"), [1, 2, 5, 10], f32, f32, {}),
        "s3_sigma_min": (dict(wan, flow_shift=3.0, final_sigmas_type="sigma_min"), [1, 3, 10], f32, f32, {}),
        "s5_bh1_sigma_min": (dict(wan, flow_shift=5.0, solver_type="bh1", final_sigmas_type="sigma_min"),
                             [4], f32, f32, {}),
        "s5_disable_corr": (dict(wan, flow_shift=5.0, disable_corrector=[0, 2]), [5, 10], f32, f32, {}),
        "s5_no_lof": (dict(wan, flow_shift=5.0, lower_order_final=False), [5], f32, f32, {}),
        "s5_wan_bf16_out": (dict(wan, flow_shift=5.0), [5, 50], bf16, f32, {}),
        "s3_bf16_all": (dict(wan, flow_shift=3.0), [5, 10], bf16, bf16, {}),
        "s5_order1": (dict(wan, flow_shift=5.0, solver_order=1), [5], f32, f32, {}),
        "s5_order3": (dict(wan, flow_shift=5.0, solver_order=3), [5, 10], f32, f32, {}),
        "dyn_mu": (dict(wan, use_dynamic_shifting=True), [5], f32, f32, {"mu": 0.8}),
        "s5_terminal": (dict(wan, flow_shift=5.0, shift_terminal=0.1), [5], f32, f32, {}),
        "s3_eps_flow": (dict(wan, flow_shift=3.0, prediction_type="epsilon"), [5], f32, f32, {}),
        "s3_custom_sigmas": (dict(wan, flow_shift=3.0), [4], f32, f32,
                             {"sigmas": [1.0, 0.8, 0.45, 0.2]}),
    }
    shape = (1, 4, 2, 3, 3)
    gen = torch.Generator("cpu").manual_seed(1234)
    tensors, meta = {}, {}
    for name, (cfg, steps, mo_dt, x_dt, extra) in cases.items():
        meta[name] = {"config": cfg, "steps": steps, "model_output_dtype": str(mo_dt).split(".")[-1],
                      "sample_dtype": str(x_dt).split(".")[-1], "set_timesteps": extra}
        for n in steps:
            s = UniPCMultistepScheduler(**cfg)
            import numpy as np
            kw = {}
            if "mu" in extra:
                kw["mu"] = extra["mu"]
            if "sigmas" in extra:
                kw["sigmas"] = np.array(extra["sigmas"], dtype=np.float64)
                assert len(extra["sigmas"]) == n
            s.set_timesteps(n, **kw)
            s.set_begin_index(0)  # as WanPipeline
            p = f"{name}.n{n}."
            tensors[p + "sigmas"] = s.sigmas.clone()
            tensors[p + "timesteps"] = s.timesteps.clone()
            lam = [torch.log(1 - sg) - torch.log(sg) for sg in s.sigmas]
            tensors[p + "lambdas"] = torch.stack(lam)
            x = torch.randn(shape, generator=gen).to(x_dt)
            tensors[p + "sample0"] = x
            for i, t in enumerate(s.timesteps):
                mo = torch.randn(shape, generator=gen).to(mo_dt)
                x = s.step(mo, t, x, return_dict=False)[0]
                assert x.dtype == x_dt
                tensors[p + f"mo{i}"] = mo
                tensors[p + f"prev{i}"] = x.clone()

    sched = {}
    for shift in (3.0, 5.0):
        for n in list(range(1, 31)) + [40, 50, 60, 100, 250, 1000]:
            s = UniPCMultistepScheduler(**dict(wan, flow_shift=shift))
            s.set_timesteps(n)
            sched[f"unipc_s{int(shift)}.n{n}.sigmas"] = s.sigmas.clone()
            sched[f"unipc_s{int(shift)}.n{n}.timesteps"] = s.timesteps.clone()
            sched[f"unipc_s{int(shift)}.n{n}.lambdas"] = torch.stack(
                [torch.log(1 - sg) - torch.log(sg) for sg in s.sigmas])
    for n in (1, 2, 3, 4, 10, 50):
        f = FlowMatchEulerDiscreteScheduler(shift=7.0)
        f.set_timesteps(n)
        sched[f"fme7.n{n}.sigmas"] = f.sigmas.clone()
        sched[f"fme7.n{n}.timesteps"] = f.timesteps.clone()

    _common.save_tensors(out / "unipc.safetensors", tensors)
    _common.save_tensors(out / "schedules.safetensors", sched)
    _common.write_json(out / "cases.json", meta)


if __name__ == "__main__":
    main()
