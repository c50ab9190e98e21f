"""Random FluxPipeline calls, Diffusers vs `diffq generate`, on the bundled tiny pipelines: a developer's
check for the general behaviour the committed fixtures do not pin (prompts from the tokenizer corpus,
sizes, step counts, custom sigmas, guidance, seeds, batch sizes, true CFG, scheduler config variants).
Not a fixture script (nothing is written under tests/); prints one line per case and exits 1 if any
case's final latents differ by more than the pipeline tests' bound (max |d| / max |ref| <= 1e-3) or its
image by more than their PSNR bound (>= 40 dB).

  tools/.venv/bin/python tools/reference/crosscheck_flux.py [--cases 20] [--seed 0] [--build build]
      [--random-models] [--dtype bfloat16] [--quant SCHEME] [--compile full|regional]

--compile: diffq's transformer runs compiled (`diffq generate --compile ...`), Diffusers' eagerly.

--random-models: every case also gets its own freshly built pipeline with a random config (CLIP width,
heads, layers, activation and eos id; T5 width, heads, d_kv, layers, gated-gelu or relu feed-forward,
bucket counts; FLUX heads, head dim and RoPE axes, double/single block counts, latent channels,
guidance embedding; VAE depth, widths, groups, layers per block, quant convs, mid-block attention,
scaling/shift factors), random weights, the tiny pipelines' tokenizers.
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


def random_model_config(rng: random.Random) -> dict:
    clip_w = rng.choice([8, 16, 32])
    t5_w = rng.choice([8, 16])
    head_dim = rng.choice([8, 12, 16])
    a = 2 * rng.randint(1, head_dim // 2 - 2)
    b = 2 * rng.randint(1, (head_dim - a) // 2 - 1)
    groups = rng.choice([4, 8])
    depth = rng.randint(1, 3)
    widths = sorted(groups * rng.choice([1, 2, 4]) for _ in range(depth))
    return dict(
        clip=dict(vocab_size=49408, hidden_size=clip_w, intermediate_size=rng.randint(8, 40),
                  num_hidden_layers=rng.randint(1, 3), num_attention_heads=rng.choice([h for h in (1, 2, 4) if clip_w % h == 0]),
                  max_position_embeddings=77, hidden_act=rng.choice(["quick_gelu", "gelu"]), projection_dim=8,
                  layer_norm_eps=1e-5, bos_token_id=0, eos_token_id=rng.choice([2, 49407]), pad_token_id=1),
        t5=dict(vocab_size=32128, d_model=t5_w, d_kv=rng.choice([4, 8]), d_ff=rng.randint(8, 40),
                num_layers=rng.randint(1, 3), num_heads=rng.choice([1, 2, 4]),
                relative_attention_num_buckets=rng.choice([8, 32]), relative_attention_max_distance=rng.choice([16, 128]),
                feed_forward_proj=rng.choice(["gated-gelu", "relu"]), dropout_rate=0.0, layer_norm_epsilon=1e-6,
                tie_word_embeddings=False, is_encoder_decoder=False, use_cache=False, pad_token_id=0, eos_token_id=1,
                decoder_start_token_id=0),
        flux=dict(patch_size=1, in_channels=None, num_layers=rng.randint(0, 2), num_single_layers=rng.randint(1, 2),
                  attention_head_dim=head_dim, num_attention_heads=rng.randint(1, 3), joint_attention_dim=t5_w,
                  pooled_projection_dim=clip_w, axes_dims_rope=(a, b, head_dim - a - b),
                  guidance_embeds=rng.random() < 0.5),
        vae=dict(in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * depth,
                 up_block_types=("UpDecoderBlock2D",) * depth, block_out_channels=tuple(widths),
                 layers_per_block=rng.randint(1, 2), act_fn="silu", latent_channels=rng.choice([4, 16]),
                 norm_num_groups=groups, sample_size=32, scaling_factor=round(rng.uniform(0.2, 1.5), 4),
                 shift_factor=round(rng.uniform(-0.2, 0.2), 4), force_upcast=True,
                 use_quant_conv=rng.random() < 0.5, use_post_quant_conv=rng.random() < 0.5,
                 mid_block_add_attention=rng.random() < 0.5))


def build_random_pipeline(cfg: dict, seed: int, dst: Path) -> None:
    """tiny-flux's folder (tokenizers, model_index.json) with every model replaced by a random one."""
    import torch
    from diffusers import AutoencoderKL, FluxTransformer2DModel
    from transformers import CLIPTextConfig, CLIPTextModel, T5Config, T5EncoderModel
    from make_tiny_flux import perturb_constants

    shutil.copytree(FIXTURES / "tiny-flux", dst, ignore=shutil.ignore_patterns("reference"))
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    flux = dict(cfg["flux"], in_channels=4 * cfg["vae"]["latent_channels"])
    models = dict(text_encoder=CLIPTextModel(CLIPTextConfig(**cfg["clip"])),
                  text_encoder_2=T5EncoderModel(T5Config(**cfg["t5"])),
                  transformer=FluxTransformer2DModel(**flux), vae=AutoencoderKL(**cfg["vae"]))
    for name, m in models.items():
        perturb_constants(m.eval(), gen)
        shutil.rmtree(dst / name)
        m.save_pretrained(dst / name, safe_serialization=True)


def make_case(rng: random.Random, corpus: list[str], mult: int = 4) -> dict:
    folder = rng.choice(["tiny-flux", "tiny-flux-schnell"])
    case = dict(folder=folder, prompt=rng.choice(corpus), height=mult * rng.randint(1, 8),
                width=mult * rng.randint(1, 8),
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


# Final-latent bounds of tests/pipelines/test_flux_quantized.cpp (diffq vs Diffusers, same scheme).
# Schemes that quantize activations on the fly: a 1-ulp change of an activation can flip its int8 code,
# so the pipeline's result moves by far more than fp32 rounding (see docs/quantization.md); their bound
# also accepts SENSITIVITY_FACTOR x Diffusers' own move under a 1-ulp nudge of the initial noise.
DYNAMIC_ACTIVATION = {"int8dq"}
SENSITIVITY_FACTOR = 4.0
QUANT_BOUND = {"nf4": 1e-4, "fp4": 1e-4, "int8": 1e-3, "int8wo": 1e-4, "int8dq": 5e-3, "fp8wo": 1e-4,
               "quanto-int8": 1e-4, "quanto-int4": 1e-4, "quanto-int2": 1e-4, "quanto-fp8": 1e-4}


def quantization_config(scheme: str):
    """Diffusers' PipelineQuantizationConfig for `scheme` on the transformer, as make_flux_quantized.py
    builds it (bitsandbytes' GPU-only checks lifted there too)."""
    from diffusers.quantizers import PipelineQuantizationConfig
    from make_flux_quantized import SCHEMES

    backend, kw = SCHEMES[scheme]
    if backend == "torchao":
        import torchao.quantization as tq
        from diffusers import TorchAoConfig

        return PipelineQuantizationConfig(quant_mapping={"transformer": TorchAoConfig(getattr(tq, kw)())})
    if backend == "quanto":
        from diffusers import QuantoConfig

        return PipelineQuantizationConfig(quant_mapping={"transformer": QuantoConfig(**kw)})
    from diffusers.quantizers.bitsandbytes import bnb_quantizer

    for cls in (bnb_quantizer.BnB4BitDiffusersQuantizer, bnb_quantizer.BnB8BitDiffusersQuantizer):
        cls.validate_environment = lambda self, *a, **k: None
        cls.update_device_map = lambda self, device_map: device_map or {"": "cpu"}
    return PipelineQuantizationConfig(quant_backend=backend, quant_kwargs=kw, components_to_quantize=["transformer"])


def diffusers_latents(case: dict, folder: Path, dtype: str, quant: str | None, sensitivity_check: bool):
    import torch
    from diffusers import FluxPipeline

    extra = {"quantization_config": quantization_config(quant)} if quant else {}
    pipe = FluxPipeline.from_pretrained(folder, dtype=getattr(torch, dtype), **extra)
    pipe.set_progress_bar_config(disable=True)
    kw = {k: v for k, v in case.items() if k not in ("folder", "seed", "scheduler", "model")}
    final = {}

    def catch(p, i, t, cb):
        final["latents"] = cb["latents"].clone().float()
        return {}


    images = pipe(**kw, generator=torch.Generator("cpu").manual_seed(case["seed"]), output_type="np",
                  callback_on_step_end=catch, callback_on_step_end_tensor_inputs=["latents"]).images
    import numpy as np

    ref, sensitivity = final["latents"], None
    if sensitivity_check:
        # Diffusers against itself with the seed's noise moved by ~1 ulp: how far rounding flips of the
        # dynamically quantized activations alone carry the result (the fp32 pipeline moves ~1e-7).
        batch = len(case["prompt"]) if isinstance(case["prompt"], list) else 1
        noise, _ = pipe.prepare_latents(batch * case["num_images_per_prompt"], pipe.transformer.config.in_channels // 4,
                                        case["height"], case["width"], torch.float32, "cpu",
                                        torch.Generator("cpu").manual_seed(case["seed"]))
        nudged = noise * (1 + 1e-7 * torch.randn(noise.shape, generator=torch.Generator().manual_seed(1)))
        pipe(**kw, latents=nudged, output_type="latent", callback_on_step_end=catch,
             callback_on_step_end_tensor_inputs=["latents"])
        sensitivity = float((final["latents"] - ref).abs().max() / ref.abs().max().clamp_min(1e-30))
    return ref, np.round(images * 255).astype(np.uint8), sensitivity


def diffq_latents(case: dict, folder: Path, diffq: Path, out: Path, dtype: str, quant: str | None,
                  compile_mode: str | None = None):
    import torch
    from safetensors.torch import load_file

    args = [str(diffq), "generate", "-m", str(folder), "-p", case["prompt"], "--seed", str(case["seed"]),
            "--width", str(case["width"]), "--height", str(case["height"]), "--guidance", str(case["guidance_scale"]),
            "--max-sequence-length", str(case["max_sequence_length"]), "--num-images", str(case["num_images_per_prompt"]),
            "-o", str(out.with_suffix(".png")), "--output-latents", str(out), "--dtype", dtype]
    if quant:
        args += ["--quant", quant, "--quantize", "transformer"]
    if compile_mode:
        args += ["--compile", compile_mode]
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
    import numpy as np
    from PIL import Image

    n = case["num_images_per_prompt"]
    pngs = [out.with_suffix(".png")] if n == 1 else [out.with_name(f"{out.stem}-{i}.png") for i in range(n)]
    images = np.stack([np.asarray(Image.open(p).convert("RGB")) for p in pngs])
    return (load_file(str(out))["latents"].to(torch.float32), images), ""


def psnr(a, b) -> float:
    import numpy as np

    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return float("inf") if mse == 0 else 10 * np.log10(255.0**2 / mse)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--build", default=str(ROOT / "build"))
    ap.add_argument("--random-models", action="store_true")
    ap.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    ap.add_argument("--quant", choices=sorted(QUANT_BOUND), default=None,
                    help="quantize the transformer in both (the bound becomes the scheme's pipeline-test bound)")
    ap.add_argument("--compile", choices=["full", "regional"], default=None,
                    help="run diffq's transformer compiled (Diffusers stays eager)")
    ap.add_argument("--sensitivity", action="store_true",
                    help="also report Diffusers vs itself with the noise nudged by ~1 ulp (always on for int8dq)")
    ap.add_argument("--max-rel", type=float, default=None, help="latents bound (default 1e-3; bfloat16: 5e-2)")
    ap.add_argument("--min-psnr", type=float, default=None, help="image bound in dB (default 40; bfloat16: 30)")
    a = ap.parse_args()
    deterministic(0)
    bf16 = a.dtype == "bfloat16"
    max_rel = a.max_rel if a.max_rel is not None else (5e-2 if bf16 else max(1e-3, QUANT_BOUND.get(a.quant, 0)))
    min_psnr = a.min_psnr if a.min_psnr is not None else (30.0 if bf16 else 40.0)
    corpus_file = json.loads((FIXTURES / "tokenizers" / "corpus.json").read_text())
    corpus = [c if isinstance(c, str) else c.get("text", "") for c in corpus_file["cases"]]
    corpus = [c for c in corpus if c]
    rng = random.Random(a.seed)
    diffq = Path(a.build) / "bin" / "diffq"
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for i in range(a.cases):
            folder = tmp / f"pipe{i}"
            if a.random_models:
                model = random_model_config(rng)
                vsf = 2 ** (len(model["vae"]["block_out_channels"]) - 1)
                case = make_case(rng, corpus, mult=2 * vsf)
                case["folder"] = "random"
                case["model"] = model
                build_random_pipeline(model, rng.randrange(2**31), folder)
                if not model["flux"]["guidance_embeds"]:
                    case["guidance_scale"] = 0.0
            else:
                case = make_case(rng, corpus)
                shutil.copytree(FIXTURES / case["folder"], folder, ignore=shutil.ignore_patterns("reference"))
            cfg_path = folder / "scheduler" / "scheduler_config.json"
            cfg = json.loads(cfg_path.read_text())
            cfg.update(case["scheduler"])
            cfg_path.write_text(json.dumps(cfg, indent=2))
            ref, ref_img, sensitivity = diffusers_latents(case, folder, a.dtype, a.quant,
                                                          a.sensitivity or a.quant in DYNAMIC_ACTIVATION)
            got, err = diffq_latents(case, folder, diffq, tmp / f"out{i}.safetensors", a.dtype, a.quant, a.compile)
            got, img = got if got is not None else (None, None)
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
                db = psnr(img, ref_img) if img.shape == ref_img.shape else float("nan")
                dynamic = a.quant in DYNAMIC_ACTIVATION
                bound = max(max_rel, SENSITIVITY_FACTOR * sensitivity) if dynamic else max_rel
                ok = rel <= bound and db >= min_psnr
                bad += not ok
                sens = f" (Diffusers vs itself, noise nudged 1 ulp: {sensitivity:.2e})" if sensitivity is not None else ""
                print(f"case {i}: {'ok  ' if ok else 'FAIL'} rel {rel:.2e}{sens} PSNR {db:.1f} dB "
                      f"{json.dumps(case, ensure_ascii=False)}")
            shutil.rmtree(folder)
    print(f"{a.cases - bad}/{a.cases} cases agree")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
