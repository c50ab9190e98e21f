"""Random WanPipeline calls, Diffusers vs `diffq generate`, on the bundled tiny Wan pipelines: a developer's
check for the general behaviour the committed fixtures do not pin (prompts from the tokenizer corpus incl.
unicode, emoji and long ones, negative prompts, sizes, frame counts incl. ones that are not 4k+1, step counts,
guidance <= 1 and > 1, guidance_2 on two-expert folders, seeds, videos per prompt, max_sequence_length,
scheduler config variants). Not a fixture script (nothing is written under tests/); prints one line per case
and exits 1 if any case's final latents differ by more than the pipeline tests' bound (max |d| / max |ref|
<= 1e-3) or any of its frames by more than their PSNR bound (>= 40 dB; diffq's PNG frames against Diffusers'
np frames rounded as output_type "pil" does: (x * 255).round()). Where Diffusers raises (or computes
non-finite latents), diffq must refuse with an error too.

  tools/.venv/bin/python tools/reference/crosscheck_wan.py [--cases 20] [--seed 0] [--build build]
      [--random-models] [--dtype bfloat16] [--quant SCHEME]

--random-models: every case gets its own freshly built pipeline with a random config: WanTransformer3DModel
(heads, head dim and so the RoPE t/h/w split, layers, ffn, freq_dim, patch size, cross_attn_norm, rope length;
transformer_2 for two experts), UMT5 or T5 text encoder (width, d_kv, heads, layers, gated-gelu or relu,
bucket counts), AutoencoderKLWan 2.1 (base_dim, z_dim, dim_mult depth and widths, num_res_blocks, attn_scales,
temperal_downsample) or the 2.2 variant (is_residual, patch_size 2, decoder_base_dim), boundary_ratio,
expand_timesteps; random weights, tiny-flux's T5 tokenizer; saved with save_pretrained into a temp dir.
"""
from __future__ import annotations

import argparse
import json
import math
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import FIXTURES, ROOT, deterministic

FOLDERS = ["tiny-wan", "tiny-wan22", "tiny-wan-ti2v"]
UNIPC_BASE = dict(prediction_type="flow_prediction", use_flow_sigmas=True, num_train_timesteps=1000,
                  solver_order=2, solver_type="bh2", predict_x0=True, lower_order_final=True,
                  final_sigmas_type="zero", flow_shift=3.0)


# ---------------------------------------------------------------------------------------------------------
# scheduler variants


def scheduler_variant(rng: random.Random) -> dict:
    """A scheduler for the case: {} (the folder's own), UniPC edits that Wan checkpoints / users make, or
    FlowMatchEulerDiscreteScheduler with a shift (Diffusers' own Wan pipeline tests use shift=7.0)."""
    r = rng.random()
    if r < 0.2:
        return {}
    if r < 0.4:
        return {"_class_name": "FlowMatchEulerDiscreteScheduler", "shift": rng.choice([1.0, 3.0, 5.0, 7.0])}
    edit: dict = {}
    for _ in range(rng.randint(1, 3)):
        edit.update(rng.choice([
            {"flow_shift": rng.choice([1.0, 2.0, 5.0, 8.0, 12.0])},
            {"solver_order": rng.choice([1, 2, 3])},
            {"solver_type": rng.choice(["bh1", "bh2"])},
            {"lower_order_final": False},
            {"final_sigmas_type": "sigma_min"},
            {"disable_corrector": rng.choice([[0], [1], [0, 2]])},
        ]))
    return edit


def apply_scheduler(folder: Path, variant: dict) -> None:
    if not variant:
        return
    cfg_path = folder / "scheduler" / "scheduler_config.json"
    if variant.get("_class_name") == "FlowMatchEulerDiscreteScheduler":
        cfg = {"_class_name": "FlowMatchEulerDiscreteScheduler", "num_train_timesteps": 1000,
               "shift": variant["shift"]}
        mi = json.loads((folder / "model_index.json").read_text())
        mi["scheduler"] = ["diffusers", "FlowMatchEulerDiscreteScheduler"]
        (folder / "model_index.json").write_text(json.dumps(mi, indent=2))
    else:
        cfg = json.loads(cfg_path.read_text())
        cfg.update(variant)
    cfg_path.write_text(json.dumps(cfg, indent=2))


# ---------------------------------------------------------------------------------------------------------
# random model configs


def random_model_config(rng: random.Random) -> dict:
    te_w = rng.choice([8, 12, 16])
    umt5 = rng.random() < 0.7
    te = dict(vocab_size=32128, d_model=te_w, d_kv=rng.choice([2, 4, 8]), d_ff=rng.randint(8, 40),
              num_layers=rng.randint(1, 3), num_heads=rng.choice([1, 2, 4]),
              relative_attention_num_buckets=rng.choice([8, 32]), relative_attention_max_distance=rng.choice([16, 128]),
              feed_forward_proj=rng.choice(["gated-gelu", "relu"]), dropout_rate=0.0, layer_norm_epsilon=1e-6,
              tie_word_embeddings=False, is_encoder_decoder=False, use_cache=False, pad_token_id=0, eos_token_id=1,
              decoder_start_token_id=0)
    v22 = rng.random() < 0.35
    depth = rng.randint(1, 4)
    mults = sorted(rng.choice([1, 2, 4]) for _ in range(depth))
    if v22:  # the residual blocks' average shortcut needs the last level no wider than the one before it
        mults = mults[:-1] + mults[-2:-1] if depth > 1 else [1]
    tds = [rng.random() < 0.6 for _ in range(depth - 1)]
    base = rng.choice([4, 6, 8])
    z = rng.choice([4, 8, 16]) if not v22 else rng.choice([8, 12, 48])
    vae = dict(base_dim=base, z_dim=z, dim_mult=mults, num_res_blocks=rng.randint(1, 2),
               attn_scales=sorted({rng.choice([1.0, 0.5, 0.25]) for _ in range(rng.randint(0, 2))}),
               temperal_downsample=tds, scale_factor_temporal=2 ** sum(tds))
    if v22:
        vae.update(decoder_base_dim=rng.choice([base, 2 * base]), is_residual=True, patch_size=2, in_channels=12,
                   out_channels=12, scale_factor_spatial=2 ** (depth - 1) * 2)
    else:
        vae.update(scale_factor_spatial=2 ** (depth - 1))
    head_dim = rng.choice([6, 8, 10, 12, 14, 16, 20, 24])
    tr = dict(patch_size=rng.choice([(1, 2, 2), (1, 2, 2), (1, 1, 1)]), num_attention_heads=rng.randint(1, 3),
              attention_head_dim=head_dim, in_channels=z, out_channels=z, text_dim=te_w,
              freq_dim=rng.choice([8, 15, 32, 256]), ffn_dim=rng.randint(8, 48), num_layers=rng.randint(0, 3),
              cross_attn_norm=rng.random() < 0.6, qk_norm="rms_norm_across_heads", eps=rng.choice([1e-6, 1e-5]),
              rope_max_seq_len=rng.choice([32, 1024]))
    two = rng.random() < 0.35
    cfg = dict(text_encoder=dict(umt5=umt5, config=te), vae=vae, transformer=tr,
               boundary_ratio=round(rng.uniform(0.3, 0.95), 3) if two else None,
               expand_timesteps=(v22 and rng.random() < 0.7) or rng.random() < 0.1)
    if two:
        cfg["transformer_2"] = dict(tr, num_layers=rng.randint(0, 3), num_attention_heads=rng.randint(1, 3),
                                    ffn_dim=rng.randint(8, 48))
    return cfg


def build_random_pipeline(cfg: dict, seed: int, dst: Path) -> None:
    """A WanPipeline folder with every model freshly built from `cfg` (random weights), tiny-flux's T5
    tokenizer, a Wan-style UniPC scheduler, saved with save_pretrained."""
    import torch
    from diffusers import AutoencoderKLWan, UniPCMultistepScheduler, WanPipeline, WanTransformer3DModel
    from transformers import AutoTokenizer, T5Config, T5EncoderModel, UMT5Config, UMT5EncoderModel
    from make_tiny_wan import latent_stats, perturb_constants

    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    te = cfg["text_encoder"]
    text_encoder = (UMT5EncoderModel(UMT5Config(**te["config"])) if te["umt5"]
                    else T5EncoderModel(T5Config(**te["config"])))
    mean, std = latent_stats(cfg["vae"]["z_dim"], gen)
    models = dict(text_encoder=text_encoder, vae=AutoencoderKLWan(**cfg["vae"], latents_mean=mean, latents_std=std),
                  transformer=WanTransformer3DModel(**cfg["transformer"]))
    if "transformer_2" in cfg:
        models["transformer_2"] = WanTransformer3DModel(**cfg["transformer_2"])
    for m in models.values():
        perturb_constants(m.eval(), gen)
    tok = AutoTokenizer.from_pretrained(str(FIXTURES / "tiny-flux" / "tokenizer_2"))
    pipe = WanPipeline(tokenizer=tok, scheduler=UniPCMultistepScheduler(**UNIPC_BASE), boundary_ratio=cfg["boundary_ratio"],
                       expand_timesteps=cfg["expand_timesteps"], **models)
    pipe.save_pretrained(str(dst), safe_serialization=True)


def folder_geometry(folder: Path) -> tuple[int, int, bool]:
    """(spatial size multiple, temporal factor, two experts) of a Wan folder, as WanPipeline computes them."""
    mi = json.loads((folder / "model_index.json").read_text())
    vae = json.loads((folder / "vae" / "config.json").read_text())
    tr_name = "transformer" if mi.get("transformer", [None])[0] else "transformer_2"
    tr = json.loads((folder / tr_name / "config.json").read_text())
    mult = vae.get("scale_factor_spatial", 8) * tr["patch_size"][1]
    return mult, vae.get("scale_factor_temporal", 4), mi.get("boundary_ratio") is not None


# ---------------------------------------------------------------------------------------------------------
# cases


def make_case(rng: random.Random, corpus: list[str], folder: str, mult: int, two_experts: bool,
              odd_sizes: bool) -> dict:
    m = math.lcm(mult, 16)  # Diffusers' check_inputs wants multiples of 16, the patchifier multiples of `mult`
    case = dict(folder=folder, prompt=rng.choice(corpus), height=m * rng.randint(1, max(1, 64 // m)),
                width=m * rng.randint(1, max(1, 64 // m)), num_frames=rng.randint(1, 17),
                num_inference_steps=rng.randint(1, 8), seed=rng.randrange(2**63),
                max_sequence_length=rng.choice([1, 8, 33, 77, 128, 512]),
                num_videos_per_prompt=rng.choice([1, 1, 1, 2]))
    r = rng.random()
    case["guidance_scale"] = 1.0 if r < 0.15 else round(rng.uniform(0.0, 1.0), 2) if r < 0.3 else round(rng.uniform(1.05, 8.0), 2)
    if rng.random() < 0.4:
        case["negative_prompt"] = rng.choice(corpus)
    if two_experts and rng.random() < 0.6:
        case["guidance_scale_2"] = rng.choice([1.0, 0.5, round(rng.uniform(1.05, 8.0), 2)])
    elif not two_experts and rng.random() < 0.05:
        case["guidance_scale_2"] = 3.0  # Diffusers raises: no boundary_ratio
    if odd_sizes and rng.random() < 0.1:
        # multiples of 16 that are not multiples of `mult` (Diffusers rounds them down with a warning), or
        # sizes that are no multiple of 16 (Diffusers raises)
        case[rng.choice(["height", "width"])] = rng.choice([16 * rng.randint(1, 4), 8 * rng.randint(1, 8), 20])
    return case


# ---------------------------------------------------------------------------------------------------------
# running both


def quantization_config(scheme: str, components: list[str]):
    """Diffusers' PipelineQuantizationConfig for `scheme` on `components`, as crosscheck_flux.py builds it."""
    from diffusers.quantizers import PipelineQuantizationConfig
    from make_flux_quantized import SCHEMES

    backend, kw = SCHEMES[scheme]
    if backend == "torchao":
        import torchao.quantization as tq
        from diffusers import TorchAoConfig

        return PipelineQuantizationConfig(quant_mapping={c: TorchAoConfig(getattr(tq, kw)()) for c in components})
    if backend == "quanto":
        from diffusers import QuantoConfig

        return PipelineQuantizationConfig(quant_mapping={c: QuantoConfig(**kw) for c in components})
    from diffusers.quantizers.bitsandbytes import bnb_quantizer

    for cls in (bnb_quantizer.BnB4BitDiffusersQuantizer, bnb_quantizer.BnB8BitDiffusersQuantizer):
        cls.validate_environment = lambda self, *a, **k: None
        cls.update_device_map = lambda self, device_map: device_map or {"": "cpu"}
    return PipelineQuantizationConfig(quant_backend=backend, quant_kwargs=kw, components_to_quantize=components)


def transformer_components(folder: Path) -> list[str]:
    mi = json.loads((folder / "model_index.json").read_text())
    return [c for c in ("transformer", "transformer_2") if mi.get(c, [None])[0]]


def diffusers_run(case: dict, folder: Path, dtype: str, quant: str | None):
    """(final latents, frames as uint8 [B, F, H, W, 3]) or the exception Diffusers raised."""
    import numpy as np
    import torch
    from diffusers import WanPipeline

    try:
        extra = {"quantization_config": quantization_config(quant, transformer_components(folder))} if quant else {}
        pipe = WanPipeline.from_pretrained(str(folder), dtype=getattr(torch, dtype), **extra)
        pipe.set_progress_bar_config(disable=True)
        kw = {k: v for k, v in case.items() if k not in ("folder", "seed", "scheduler", "model")}
        lat = pipe(**kw, generator=torch.Generator("cpu").manual_seed(case["seed"]), output_type="latent",
                   return_dict=False)[0]
        frames = pipe(**kw, generator=torch.Generator("cpu").manual_seed(case["seed"]), output_type="np",
                      return_dict=False)[0]
    except Exception as e:  # noqa: BLE001  (any refusal counts; diffq must refuse too)
        return None, None, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:200]
    frames = np.asarray(frames)
    ok = np.isfinite(frames).all()
    u8 = np.round(np.clip(frames, 0, 1) * 255).astype(np.uint8) if ok else None
    return lat.float(), u8, ""


def diffq_args(case: dict, folder: Path, diffq: Path, dtype: str, quant: str | None) -> list[str]:
    args = [str(diffq), "generate", "-m", str(folder), "-p", case["prompt"], "--seed", str(case["seed"]),
            "--width", str(case["width"]), "--height", str(case["height"]), "--frames", str(case["num_frames"]),
            "--steps", str(case["num_inference_steps"]), "--guidance", str(case["guidance_scale"]),
            "--max-sequence-length", str(case["max_sequence_length"]),
            "--num-images", str(case["num_videos_per_prompt"]), "--dtype", dtype]
    if "negative_prompt" in case:
        args += ["-n", case["negative_prompt"]]
    if "guidance_scale_2" in case:
        args += ["--guidance-2", str(case["guidance_scale_2"])]
    if quant:
        args += ["--quant", quant, "--quantize", ",".join(transformer_components(folder))]
    return args


def last_line(r: subprocess.CompletedProcess) -> str:
    lines = [l for l in r.stderr.strip().splitlines() if l.strip()]
    return lines[-1] if lines else f"exit {r.returncode}"


def diffq_run(case: dict, folder: Path, diffq: Path, out: Path, dtype: str, quant: str | None):
    """(latents, frames uint8 [B, F, H, W, 3], stderr of the latent run) or (None, None, error)."""
    import numpy as np
    import torch
    from PIL import Image
    from safetensors.torch import load_file

    base = diffq_args(case, folder, diffq, dtype, quant)
    r = subprocess.run(base + ["--output-type", "latent", "-o", str(out / "latents.safetensors")],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return None, None, last_line(r)
    lat = load_file(str(out / "latents.safetensors"))["latents"].to(torch.float32)
    r2 = subprocess.run(base + ["-o", str(out / "video.mp4"), "--output-frames", str(out / "frames")],
                        capture_output=True, text=True)
    if r2.returncode != 0:
        return lat, None, "frames run: " + last_line(r2)
    n = case["num_videos_per_prompt"]
    dirs = [out / "frames"] if n == 1 else [out / "frames" / str(i) for i in range(n)]
    videos = [np.stack([np.asarray(Image.open(p).convert("RGB")) for p in sorted(d.glob("*.png"))]) for d in dirs]
    return lat, np.stack(videos), r.stderr


def psnr(a, b) -> float:
    import numpy as np

    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return float("inf") if mse == 0 else 10 * math.log10(255.0**2 / mse)


def check_case(case: dict, folder: Path, diffq: Path, out: Path, a, max_rel: float, min_psnr: float,
               temporal: int) -> tuple[bool, str]:
    ref, ref_frames, ref_err = diffusers_run(case, folder, a.dtype, a.quant)
    out.mkdir(parents=True, exist_ok=True)
    got, frames, info = diffq_run(case, folder, diffq, out, a.dtype, a.quant)
    if ref is None or not bool(ref.isfinite().all()) or ref_frames is None:
        why = ref_err or "non-finite output"
        ok = got is None and bool(info)
        ran = "ran" if got is None or bool(got.isfinite().all()) else "ran, non-finite latents"
        return ok, f"Diffusers refuses ({why}); diffq: {info if got is None else ran}"
    if got is None or frames is None:
        return False, f"diffq refuses ({info}) where Diffusers runs"
    if got.shape != ref.shape:
        return False, f"latents {tuple(got.shape)} vs Diffusers {tuple(ref.shape)}"
    rel = float((got - ref).abs().max() / ref.abs().max().clamp_min(1e-30))
    if frames.shape != ref_frames.shape:
        return False, f"rel {rel:.2e}, frames {frames.shape} vs Diffusers {ref_frames.shape}"
    db = min(psnr(frames[b, f], ref_frames[b, f]) for b in range(frames.shape[0]) for f in range(frames.shape[1]))
    ok = rel <= max_rel and db >= min_psnr
    note = ""
    if case["num_frames"] % temporal != 1:  # diffq must say that it rounds the frame count, as Diffusers does
        said = "rounded to" in info
        ok = ok and said
        note = f", frames {case['num_frames']}->{ref_frames.shape[1]} {'(said so)' if said else '(NOT said)'}"
    return ok, f"rel {rel:.2e} min frame PSNR {db:.1f} dB{note}"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--build", default=str(ROOT / "build"))
    ap.add_argument("--random-models", action="store_true")
    ap.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    ap.add_argument("--quant", default=None, help="quantize the transformer(s) in both (nf4, int8, int8wo, ...)")
    ap.add_argument("--odd-sizes", action="store_true",
                    help="also draw sizes Diffusers rounds down (multiples of 16, not of the patchifier's) or rejects")
    ap.add_argument("--max-rel", type=float, default=None, help="latents bound (default 1e-3; bfloat16: 5e-2)")
    ap.add_argument("--min-psnr", type=float, default=None, help="frame bound in dB (default 40; bfloat16: 30)")
    ap.add_argument("--only", type=int, default=None, help="run only case number N of the drawn sequence")
    a = ap.parse_args()
    deterministic(0)
    bf16 = a.dtype == "bfloat16"
    max_rel = a.max_rel if a.max_rel is not None else (5e-2 if bf16 else 1e-3)
    min_psnr = a.min_psnr if a.min_psnr is not None else (30.0 if bf16 else 40.0)
    corpus_file = json.loads((FIXTURES / "tokenizers" / "corpus.json").read_text())
    corpus = [c if isinstance(c, str) else c.get("text", "") for c in corpus_file["cases"]]
    corpus = [c for c in corpus if c and "\0" not in c]
    rng = random.Random(a.seed)
    diffq = Path(a.build) / "bin" / "diffq"
    bad = ran = 0
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for i in range(a.cases):
            folder = tmp / f"pipe{i}"
            model = None
            if a.random_models:
                model = random_model_config(rng)
                build_seed = rng.randrange(2**31)
                name = "random"
            else:
                name = rng.choice(FOLDERS)
            variant = scheduler_variant(rng)
            case_rng = random.Random(rng.randrange(2**63))
            if a.only is not None and i != a.only:
                continue
            if model is not None:
                try:
                    build_random_pipeline(model, build_seed, folder)
                except Exception as e:  # noqa: BLE001
                    print(f"case {i}: skip (Diffusers cannot build this config: {type(e).__name__}: {e}) "
                          f"{json.dumps(model)}")
                    continue
            else:
                shutil.copytree(FIXTURES / name, folder, ignore=shutil.ignore_patterns("reference"))
            apply_scheduler(folder, variant)
            mult, temporal, two = folder_geometry(folder)
            case = make_case(case_rng, corpus, name, mult, two, a.odd_sizes)
            case["scheduler"] = variant
            if model is not None:
                case["model"] = model
            ok, msg = check_case(case, folder, diffq, tmp / f"out{i}", a, max_rel, min_psnr, temporal)
            ran += 1
            bad += not ok
            print(f"case {i}: {'ok  ' if ok else 'FAIL'} {msg} {json.dumps(case, ensure_ascii=False)}", flush=True)
            shutil.rmtree(folder, ignore_errors=True)
            shutil.rmtree(tmp / f"out{i}", ignore_errors=True)
    print(f"{ran - bad}/{ran} cases agree")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
