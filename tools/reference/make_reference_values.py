"""tests/fixtures/reference-values/: small reference values that need no model weights, computed by the
real library calls (they used to be pasted into the C++ tests as hex arrays with no script behind them).

Writes
  values.safetensors  the tensors below (bit patterns are what the tests compare)
  params.json         how each was made: configs, call arguments, library versions

  scheduler.<case>.sigmas / .timesteps   FlowMatchEulerDiscreteScheduler(**config).set_timesteps(...) for the
                                         options the Flux fixtures do not reach (static shift, Karras and
                                         exponential sigmas, shift_terminal, time_shift_type "linear",
                                         invert_sigmas); config and call in params.json["scheduler"]
  bf16_step.model_output / .sample / .prev_sample
                                         scheduler.step() with a bfloat16 model output (torch computes dt * v
                                         in bf16 and adds it to the float32 sample); model_output =
                                         torch.randn(64, generator=manual_seed(1)).to(bf16), sample = the next
                                         torch.randn(64) of the same generator
  randn.seed0.n40.{default,avx2}         torch.randn(40, generator=torch.Generator("cpu").manual_seed(0)) in a
                                         child process with ATEN_CPU_CAPABILITY=default (torch's scalar
                                         normal kernel) and =avx2 (its vectorised one); 40 is no multiple of
                                         16, so the last 16 values are redone
  latents.<case>.packed / .img_ids / .unpacked / .vae_in
                                         FluxPipeline.prepare_latents(..., dtype=bfloat16) on the tiny-flux
                                         pipeline (randn_tensor + _pack_latents + _prepare_latent_image_ids),
                                         FluxPipeline._unpack_latents, then the pipeline's own
                                         `(latents / scaling_factor) + shift_factor` (checked to be its source)
  t5_bucket.relative_position / .bidirectional / .unidirectional
                                         T5Attention._relative_position_bucket(rel, bidirectional, 32, 128)

Run: tools/reference/regenerate_fixtures.sh reference_values   (needs tests/fixtures/tiny-flux)
"""
from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys

import numpy as np

from _common import FIXTURES, deterministic, dir_size, fresh_dir, save_tensors, write_json

OUT = FIXTURES / "reference-values"

# Options the Flux fixtures do not reach; 5 steps. "sigmas" cases pass np.linspace(1.0, 0.2, 5).
SIGMAS = np.linspace(1.0, 0.2, 5).tolist()
SCHEDULER_CASES = {
    "static3_default": ({"shift": 3.0}, {"num_inference_steps": 5}),
    "static3_sigmas": ({"shift": 3.0}, {"sigmas": SIGMAS}),
    "dyn_default": ({"use_dynamic_shifting": True}, {"num_inference_steps": 5, "mu": 0.8}),
    "linear_sigmas": ({"use_dynamic_shifting": True, "time_shift_type": "linear"}, {"sigmas": SIGMAS, "mu": 0.8}),
    "terminal": ({"shift": 3.0, "shift_terminal": 0.1}, {"sigmas": SIGMAS}),
    "karras": ({"shift": 3.0, "use_karras_sigmas": True}, {"num_inference_steps": 5}),
    "exponential": ({"shift": 3.0, "use_exponential_sigmas": True}, {"num_inference_steps": 5}),
    "invert": ({"shift": 2.0, "invert_sigmas": True}, {"sigmas": SIGMAS}),
}


def ref_scheduler(out: dict, params: dict) -> None:
    import torch
    from diffusers import FlowMatchEulerDiscreteScheduler

    cases = {}
    for name, (config, call) in SCHEDULER_CASES.items():
        s = FlowMatchEulerDiscreteScheduler(**config)
        s.set_timesteps(device="cpu", **call)
        assert s.sigmas.dtype == torch.float32 and s.timesteps.dtype == torch.float32, name
        out[f"scheduler.{name}.sigmas"] = s.sigmas
        out[f"scheduler.{name}.timesteps"] = s.timesteps
        cases[name] = {"config": config, "set_timesteps": call}
    params["scheduler"] = cases


def ref_bf16_step(out: dict, params: dict) -> None:
    import torch
    from diffusers import FlowMatchEulerDiscreteScheduler

    config = {"use_dynamic_shifting": True}
    call = {"sigmas": np.linspace(1.0, 0.25, 4).tolist(), "mu": 0.7}
    g = torch.Generator("cpu").manual_seed(1)
    v = torch.randn(64, generator=g).to(torch.bfloat16)
    x = torch.randn(64, generator=g)
    s = FlowMatchEulerDiscreteScheduler(**config)
    s.set_timesteps(device="cpu", **call)
    y = s.step(v, s.timesteps[0], x, return_dict=False)[0]
    assert y.dtype == torch.bfloat16
    out.update({"bf16_step.model_output": v, "bf16_step.sample": x, "bf16_step.prev_sample": y})
    params["bf16_step"] = {"config": config, "set_timesteps": call, "step_at": "timesteps[0]",
                           "model_output": "torch.randn(64, generator=torch.Generator('cpu').manual_seed(1)).to(bf16)",
                           "sample": "the next torch.randn(64) of that generator (float32)"}


RANDN_CHILD = """
import json, sys, torch
assert torch.backends.cpu.get_cpu_capability().lower() == sys.argv[1].lower(), torch.backends.cpu.get_cpu_capability()
g = torch.Generator("cpu").manual_seed(0)
t = torch.randn(40, generator=g)
print(json.dumps(t.view(torch.int32).tolist()))
"""


def ref_randn_kernels(out: dict, params: dict) -> None:
    """torch's normal kernel per CPU capability: each in a fresh process (the capability is read once)."""
    import torch

    for cap in ("default", "avx2"):
        env = dict(os.environ, ATEN_CPU_CAPABILITY=cap)
        got = subprocess.run([sys.executable, "-c", RANDN_CHILD, cap], env=env, check=True, capture_output=True,
                             text=True).stdout
        bits = json.loads(got.strip().splitlines()[-1])
        out[f"randn.seed0.n40.{cap}"] = torch.tensor(bits, dtype=torch.int32).view(torch.float32)
    assert not torch.equal(out["randn.seed0.n40.default"], out["randn.seed0.n40.avx2"]), "kernels no longer differ"
    params["randn"] = {"call": "torch.randn(40, generator=torch.Generator('cpu').manual_seed(0))",
                       "env": "ATEN_CPU_CAPABILITY=default | avx2, one process each"}


# (batch, num_channels_latents, height, width, generator seeds); the tiny pipeline's vae_scale_factor is 2.
LATENT_CASES = {"b1c2_8x8": (1, 2, 8, 8, [5]), "b2c16_16x24": (2, 16, 16, 24, [5, 6])}


def ref_latents(out: dict, params: dict) -> None:
    import torch
    from diffusers import FluxPipeline

    src = inspect.getsource(FluxPipeline.__call__)
    line = "latents = (latents / self.vae.config.scaling_factor) + self.vae.config.shift_factor"
    assert src.count(line) == 1, "FluxPipeline's VAE input scaling changed; revisit this script"
    bf16 = torch.bfloat16
    pipe = FluxPipeline.from_pretrained(FIXTURES / "tiny-flux", dtype=bf16)
    cfg = pipe.vae.config
    cases = {}
    for name, (b, c, h, w, seeds) in LATENT_CASES.items():
        gens = [torch.Generator("cpu").manual_seed(s) for s in seeds]
        packed, img_ids = pipe.prepare_latents(b, c, h, w, bf16, torch.device("cpu"), gens if len(gens) > 1 else gens[0])
        latents = pipe._unpack_latents(packed, h, w, pipe.vae_scale_factor)
        vae_in = (latents / cfg.scaling_factor) + cfg.shift_factor  # the line checked above
        assert packed.dtype == bf16 and vae_in.dtype == bf16
        out.update({f"latents.{name}.packed": packed, f"latents.{name}.img_ids": img_ids,
                    f"latents.{name}.unpacked": latents, f"latents.{name}.vae_in": vae_in})
        cases[name] = {"batch_size": b, "num_channels_latents": c, "height": h, "width": w, "seeds": seeds,
                       "generator": "one torch.Generator('cpu').manual_seed(seed) per seed (a list when several)",
                       "dtype": "bfloat16"}
    params["latents"] = {"cases": cases, "vae_scale_factor": pipe.vae_scale_factor,
                         "scaling_factor": cfg.scaling_factor, "shift_factor": cfg.shift_factor, "scaling": line}


def ref_t5_buckets(out: dict, params: dict) -> None:
    import torch
    from transformers.models.t5.modeling_t5 import T5Attention

    rel = torch.tensor([-1000, -200, -128, -127, -64, -63, -33, -32, -16, -15, -8, -7, -1, 0, 1, 7, 8, 15, 16, 31, 32,
                        63, 64, 127, 128, 129, 1000], dtype=torch.int64)
    out["t5_bucket.relative_position"] = rel
    out["t5_bucket.bidirectional"] = T5Attention._relative_position_bucket(rel, True, 32, 128)
    out["t5_bucket.unidirectional"] = T5Attention._relative_position_bucket(rel, False, 32, 128)
    params["t5_bucket"] = {"num_buckets": 32, "max_distance": 128}


def main() -> None:
    deterministic(0)
    import diffusers
    import torch
    import transformers

    out_dir = fresh_dir(OUT)
    t: dict = {}
    params: dict = {"torch": torch.__version__.split("+")[0], "diffusers": diffusers.__version__,
                    "transformers": transformers.__version__}
    ref_scheduler(t, params)
    ref_bf16_step(t, params)
    ref_randn_kernels(t, params)
    ref_latents(t, params)
    ref_t5_buckets(t, params)
    save_tensors(out_dir / "values.safetensors", t)
    write_json(out_dir / "params.json", params)
    print(f"[reference-values] {len(t)} tensors, {dir_size(out_dir)} bytes")


if __name__ == "__main__":
    main()
