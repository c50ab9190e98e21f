"""Tiny random-weight Wan pipelines built from the REAL diffusers/transformers classes, and whole-pipeline
references computed by Diffusers' WanPipeline on the CPU in float32.

Writes
  tests/fixtures/tiny-wan/            Wan2.1-style WanPipeline folder: UMT5 text encoder, WanTransformer3DModel,
                                      AutoencoderKLWan (2.1), UniPCMultistepScheduler (flow, shift 3.0)
  tests/fixtures/tiny-wan22/          Wan2.2 A14B-style: transformer (high noise) + transformer_2 (low noise),
                                      boundary_ratio 0.875; text encoder, tokenizer and VAE are symlinks to tiny-wan
  tests/fixtures/tiny-wan-ti2v/       Wan2.2 TI2V-5B-style: expand_timesteps, 2.2 VAE (is_residual, patch_size 2,
                                      z_dim 48, spatial factor 16), UniPC shift 5.0
  <folder>/reference/<case>.safetensors + cases.json   calls (prompt, sizes, frames, steps, guidance, seed) with
                                      their prompt embeddings, initial noise, final latents and frames (np output)

The tokenizer is the real T5 tokenizer of tests/fixtures/tiny-flux/tokenizer_2 (a symlink: the umt5-xxl tokenizer
is 16 MB and cannot ship; it is the same Unigram T5TokenizerFast class), so the UMT5 vocabulary is 32128.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import torch

from _common import FIXTURES, deterministic, dir_size, fresh_dir, save_tensors, write_json

SEED = 0
UMT5_CFG = dict(vocab_size=32128, d_model=8, d_kv=4, d_ff=24, num_layers=2, num_heads=2,
                relative_attention_num_buckets=32, relative_attention_max_distance=128,
                feed_forward_proj="gated-gelu", dropout_rate=0.0, layer_norm_epsilon=1e-6,
                tie_word_embeddings=False, is_encoder_decoder=False, use_cache=False,
                pad_token_id=0, eos_token_id=1, decoder_start_token_id=0)
TR_CFG = dict(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=12, in_channels=16, out_channels=16,
              text_dim=8, freq_dim=32, ffn_dim=32, num_layers=2, cross_attn_norm=True,
              qk_norm="rms_norm_across_heads", eps=1e-6, rope_max_seq_len=32)
VAE21_CFG = dict(base_dim=6, z_dim=16, dim_mult=[1, 2, 2, 2], num_res_blocks=1, attn_scales=[],
                 temperal_downsample=[False, True, True])
VAE22_CFG = dict(base_dim=6, decoder_base_dim=8, z_dim=48, in_channels=12, out_channels=12, is_residual=True,
                 patch_size=2, dim_mult=[1, 2, 2, 2], num_res_blocks=1, scale_factor_spatial=16,
                 scale_factor_temporal=4, temperal_downsample=[False, True, True])
UNIPC_CFG = dict(prediction_type="flow_prediction", use_flow_sigmas=True, num_train_timesteps=1000,
                 solver_order=2, solver_type="bh2", predict_x0=True, lower_order_final=True,
                 final_sigmas_type="zero")

PROMPTS = ["A photo of a Cat sitting on a RED chair, 4k!!",
           "a fox &amp; a   hare\nrunning through   snow, cinematic",
           "東京の夜景 🐱 timelapse"]


def perturb_constants(module: torch.nn.Module, gen: torch.Generator) -> None:
    """Norm weights start at 1 and biases at 0: give every constant-initialised parameter some noise."""
    with torch.no_grad():
        for _, p in sorted(module.named_parameters(), key=lambda kv: kv[0]):
            if p.numel() == 1 or bool((p == p.flatten()[0]).all()):
                p.add_(0.1 * torch.randn(p.shape, generator=gen, dtype=p.dtype))


def latent_stats(n: int, gen: torch.Generator) -> tuple[list[float], list[float]]:
    mean = (0.3 * torch.randn(n, generator=gen)).tolist()
    std = (0.5 + torch.rand(n, generator=gen)).tolist()
    return [round(v, 4) for v in mean], [round(v, 4) for v in std]


def build(kind: str, gen: torch.Generator, seed: int):
    from diffusers import AutoencoderKLWan, WanTransformer3DModel
    from transformers import UMT5Config, UMT5EncoderModel

    torch.manual_seed(seed)
    if kind == "umt5":
        m = UMT5EncoderModel(UMT5Config(**UMT5_CFG)).eval()
    elif kind == "tr":
        m = WanTransformer3DModel(**TR_CFG).eval()
    elif kind == "tr_ti2v":
        m = WanTransformer3DModel(**{**TR_CFG, "in_channels": 48, "out_channels": 48}).eval()
    elif kind == "vae21":
        mean, std = latent_stats(16, gen)
        m = AutoencoderKLWan(**VAE21_CFG, latents_mean=mean, latents_std=std).eval()
    elif kind == "vae22":
        mean, std = latent_stats(48, gen)
        m = AutoencoderKLWan(**VAE22_CFG, latents_mean=mean, latents_std=std).eval()
    else:
        raise ValueError(kind)
    perturb_constants(m, gen)
    return m


def tokenizer():
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(str(FIXTURES / "tiny-flux" / "tokenizer_2"))


def symlink(folder: Path, name: str, target: str) -> None:
    (folder / name).symlink_to(target, target_is_directory=True)


def save_pipeline(pipe, folder: Path, links: dict[str, str]) -> None:
    """save_pretrained, then replace the shared components by relative symlinks."""
    import shutil
    pipe.save_pretrained(str(folder), safe_serialization=True)
    for name, target in {"tokenizer": "../tiny-flux/tokenizer_2", **links}.items():
        shutil.rmtree(folder / name)
        symlink(folder, name, target)


def run_case(pipe, folder: Path, name: str, case: dict, store_steps: bool = False) -> dict:
    from diffusers.utils.torch_utils import randn_tensor  # noqa: F401  (the pipeline's own noise)

    kw = dict(case)
    seed = kw.pop("seed")
    gen = torch.Generator("cpu").manual_seed(seed)
    record: dict[str, torch.Tensor] = {}

    def on_step(p, i, t, cb):
        if store_steps:
            record[f"step{i}.latents"] = cb["latents"].detach().clone()
        return {}

    out = pipe(**kw, generator=gen, output_type="np", return_dict=False,
               callback_on_step_end=on_step, callback_on_step_end_tensor_inputs=["latents"])[0]
    gen = torch.Generator("cpu").manual_seed(seed)
    lat = pipe(**kw, generator=gen, output_type="latent", return_dict=False)[0]
    pos, neg = pipe.encode_prompt(prompt=kw["prompt"], negative_prompt=kw.get("negative_prompt"),
                                  do_classifier_free_guidance=kw.get("guidance_scale", 5.0) > 1.0,
                                  num_videos_per_prompt=kw.get("num_videos_per_prompt", 1),
                                  max_sequence_length=kw.get("max_sequence_length", 512))
    tensors = {"frames": torch.from_numpy(out).float().contiguous(), "latents": lat.float().contiguous(),
               "prompt_embeds": pos.float().contiguous(), **record}
    if neg is not None:
        tensors["negative_prompt_embeds"] = neg.float().contiguous()
    save_tensors(folder / "reference" / f"{name}.safetensors", tensors)
    return {"name": name, "seed": seed, **{k: v for k, v in kw.items()}}


def main() -> None:
    deterministic(SEED)
    from diffusers import UniPCMultistepScheduler, WanPipeline

    gen = torch.Generator().manual_seed(SEED)
    umt5 = build("umt5", gen, SEED + 1)
    tok = tokenizer()

    # ---- Wan2.1 ----
    w21 = fresh_dir(FIXTURES / "tiny-wan")
    pipe = WanPipeline(tokenizer=tok, text_encoder=umt5.to(torch.float16), transformer=build("tr", gen, SEED + 2),
                       vae=build("vae21", gen, SEED + 3),
                       scheduler=UniPCMultistepScheduler(**UNIPC_CFG, flow_shift=3.0))
    save_pipeline(pipe, w21, {})
    (w21 / "reference").mkdir()
    pipe = WanPipeline.from_pretrained(str(w21), torch_dtype=torch.float32)
    cases = [
        run_case(pipe, w21, "cfg", dict(prompt=PROMPTS[0], height=32, width=48, num_frames=5, num_inference_steps=3,
                                        guidance_scale=5.0, seed=0), store_steps=True),
        run_case(pipe, w21, "nocfg_batch", dict(prompt=[PROMPTS[1], PROMPTS[2]], height=16, width=32, num_frames=9,
                                                num_inference_steps=2, guidance_scale=1.0, max_sequence_length=24,
                                                num_videos_per_prompt=2, seed=42)),
        run_case(pipe, w21, "negative", dict(prompt=PROMPTS[2], negative_prompt="blurry, low quality &amp; static",
                                             height=48, width=32, num_frames=1, num_inference_steps=4,
                                             guidance_scale=3.5, max_sequence_length=40, seed=7)),
    ]
    write_json(w21 / "reference" / "cases.json", cases)

    # ---- Wan2.2 A14B-style: two experts ----
    w22 = fresh_dir(FIXTURES / "tiny-wan22")
    pipe22 = WanPipeline(tokenizer=tok, text_encoder=pipe.text_encoder, transformer=build("tr", gen, SEED + 4),
                         transformer_2=build("tr", gen, SEED + 5), vae=pipe.vae,
                         scheduler=UniPCMultistepScheduler(**UNIPC_CFG, flow_shift=3.0), boundary_ratio=0.875)
    save_pipeline(pipe22, w22, {"text_encoder": "../tiny-wan/text_encoder", "vae": "../tiny-wan/vae"})
    (w22 / "reference").mkdir()
    pipe22 = WanPipeline.from_pretrained(str(w22), torch_dtype=torch.float32)
    ts = UniPCMultistepScheduler(**UNIPC_CFG, flow_shift=3.0)
    ts.set_timesteps(6)
    assert (ts.timesteps >= 875).any() and (ts.timesteps < 875).any(), ts.timesteps
    cases22 = [
        run_case(pipe22, w22, "two_experts", dict(prompt=PROMPTS[0], height=32, width=32, num_frames=5,
                                                  num_inference_steps=6, guidance_scale=4.0, guidance_scale_2=3.0,
                                                  max_sequence_length=32, seed=3)),
        run_case(pipe22, w22, "two_experts_nocfg", dict(prompt=PROMPTS[1], height=16, width=48, num_frames=9,
                                                        num_inference_steps=6, guidance_scale=1.0,
                                                        max_sequence_length=32, seed=11)),
    ]
    write_json(w22 / "reference" / "cases.json", cases22)

    # ---- Wan2.2 TI2V-5B-style: expand_timesteps, 2.2 VAE ----
    wti = fresh_dir(FIXTURES / "tiny-wan-ti2v")
    pipeti = WanPipeline(tokenizer=tok, text_encoder=pipe.text_encoder, transformer=build("tr_ti2v", gen, SEED + 6),
                         vae=build("vae22", gen, SEED + 7),
                         scheduler=UniPCMultistepScheduler(**UNIPC_CFG, flow_shift=5.0), expand_timesteps=True)
    save_pipeline(pipeti, wti, {"text_encoder": "../tiny-wan/text_encoder"})
    (wti / "reference").mkdir()
    pipeti = WanPipeline.from_pretrained(str(wti), torch_dtype=torch.float32)
    casesti = [
        run_case(pipeti, wti, "ti2v", dict(prompt=PROMPTS[2], height=32, width=64, num_frames=5,
                                           num_inference_steps=3, guidance_scale=5.0, max_sequence_length=32,
                                           seed=5)),
    ]
    write_json(wti / "reference" / "cases.json", casesti)

    for f in (w21, w22, wti):
        print(f"{f.name}: {dir_size(f) / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
