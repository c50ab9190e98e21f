"""Random FluxPipeline calls, Diffusers vs `diffq generate`, on the bundled tiny pipelines: a developer's
check for the general behaviour the committed fixtures do not pin (prompts from the tokenizer corpus,
sizes, step counts, custom sigmas, guidance, seeds, batch sizes, true CFG, scheduler config variants).
Not a fixture script (nothing is written under tests/); prints one line per case and exits 1 if any
case's final latents differ by more than the pipeline tests' bound (max |d| / max |ref| <= 1e-3).

  tools/.venv/bin/python tools/reference/crosscheck_flux.py [--cases 20] [--seed 0] [--build build]
"""
from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import FIXTURES, ROOT, deterministic


def scheduler_variant(rng: random.Random) -> dict:
    """Edits of scheduler_config.json that FLUX checkpoints and fine-tunes use."""
    return rng.choice([
        {},
        {"use_dynamic_shifting": False, "shift": rng.choice([1.0, 3.0])},
        {"shift_terminal": rng.choice([0.02, 0.1])},
        {"time_shift_type": "linear"},
        {"base_shift": 0.3, "max_shift": 1.3, "base_image_seq_len": 64, "max_image_seq_len": 1024},
    ])


def make_case(rng: random.Random, corpus: list[str]) -> dict:
    folder = rng.choice(["tiny-flux", "tiny-flux-schnell"])
    case = dict(folder=folder, prompt=rng.choice(corpus), height=4 * rng.randint(2, 16), width=4 * rng.randint(2, 16),
                guidance_scale=round(rng.uniform(0.0, 6.0), 2), seed=rng.randrange(2**63),
                max_sequence_length=rng.choice([1, 8, 33, 77, 128]), num_images_per_prompt=rng.choice([1, 1, 2]),
                scheduler=scheduler_variant(rng))
    if rng.random() < 0.3:
        case["sigmas"] = sorted((round(rng.uniform(0.05, 1.0), 3) for _ in range(rng.randint(1, 4))), reverse=True)
    else:
        case["num_inference_steps"] = rng.randint(1, 4)
    if rng.random() < 0.3:
        case["prompt_2"] = rng.choice(corpus)
    if rng.random() < 0.3:
        case["negative_prompt"] = rng.choice(corpus)
        case["true_cfg_scale"] = round(rng.uniform(1.1, 4.0), 2)
    return case


def diffusers_latents(case: dict, folder: Path):
    import torch
    from diffusers import FluxPipeline

    pipe = FluxPipeline.from_pretrained(folder, dtype=torch.float32)
    pipe.set_progress_bar_config(disable=True)
    kw = {k: v for k, v in case.items() if k not in ("folder", "seed", "scheduler")}
    final = {}

    def catch(p, i, t, cb):
        final["latents"] = cb["latents"].clone()
        return {}

    pipe(**kw, generator=torch.Generator("cpu").manual_seed(case["seed"]), output_type="latent",
         callback_on_step_end=catch, callback_on_step_end_tensor_inputs=["latents"])
    return final["latents"]


def diffq_latents(case: dict, folder: Path, diffq: Path, out: Path):
    import torch
    from safetensors.torch import load_file

    args = [str(diffq), "generate", "-m", str(folder), "-p", case["prompt"], "--seed", str(case["seed"]),
            "--width", str(case["width"]), "--height", str(case["height"]), "--guidance", str(case["guidance_scale"]),
            "--max-sequence-length", str(case["max_sequence_length"]), "--num-images", str(case["num_images_per_prompt"]),
            "--output-type", "latent", "-o", str(out)]
    if "sigmas" in case:
        args += ["--sigmas", ",".join(str(s) for s in case["sigmas"])]
    else:
        args += ["--steps", str(case["num_inference_steps"])]
    if "prompt_2" in case:
        args += ["--prompt-2", case["prompt_2"]]
    if "negative_prompt" in case:
        args += ["-n", case["negative_prompt"], "--true-cfg", str(case["true_cfg_scale"])]
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        return None, r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"exit {r.returncode}"
    return load_file(str(out))["latents"].to(torch.float32), ""


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--build", default=str(ROOT / "build"))
    a = ap.parse_args()
    deterministic(0)
    corpus_file = json.loads((FIXTURES / "tokenizers" / "corpus.json").read_text())
    corpus = [c if isinstance(c, str) else c.get("text", "") for c in corpus_file["cases"]]
    corpus = [c for c in corpus if c]
    rng = random.Random(a.seed)
    diffq = Path(a.build) / "bin" / "diffq"
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for i in range(a.cases):
            case = make_case(rng, corpus)
            folder = tmp / f"pipe{i}"
            shutil.copytree(FIXTURES / case["folder"], folder, ignore=shutil.ignore_patterns("reference"))
            cfg_path = folder / "scheduler" / "scheduler_config.json"
            cfg = json.loads(cfg_path.read_text())
            cfg.update(case["scheduler"])
            cfg_path.write_text(json.dumps(cfg, indent=2))
            ref = diffusers_latents(case, folder)
            got, err = diffq_latents(case, folder, diffq, tmp / f"out{i}.safetensors")
            if not bool(ref.isfinite().all()):
                # Diffusers computed NaN/inf (e.g. shift_terminal with one step divides 0 by 0): diffq
                # must refuse with a clear error rather than produce it.
                ok = got is None and bool(err)
                bad += not ok
                print(f"case {i}: {'ok  ' if ok else 'FAIL'} Diffusers gives non-finite latents; diffq: "
                      f"{err or 'no error'} {json.dumps(case, ensure_ascii=False)}")
            elif got is None or got.shape != ref.shape:
                bad += 1
                print(f"case {i}: FAIL ({err or f'shape {tuple(got.shape)} vs {tuple(ref.shape)}'}) {json.dumps(case)}")
            else:
                rel = float((got - ref).abs().max() / ref.abs().max().clamp_min(1e-30))
                ok = rel <= 1e-3
                bad += not ok
                print(f"case {i}: {'ok  ' if ok else 'FAIL'} rel {rel:.2e} {json.dumps(case, ensure_ascii=False)}")
            shutil.rmtree(folder)
    print(f"{a.cases - bad}/{a.cases} cases agree")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
