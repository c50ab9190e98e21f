"""Calls that Diffusers' WanPipeline refuses and diffq must refuse too (found by crosscheck_wan.py
--random-models): expand_timesteps (TI2V) with a transformer whose patch size is not (1, 2, 2). Diffusers
builds the per-token timesteps from every 2nd latent row and column, so their count differs from the
transformer's tokens and the transformer raises a shape mismatch.

A latent grid whose every-2nd-row-and-column count is 1 runs (that one timestep broadcasts to every token).

Writes tests/fixtures/wan-refusals/expand-p1/ (a WanPipeline folder: expand_timesteps, a tiny patch (1, 1, 1)
transformer; text encoder, tokenizer and VAE are symlinks to tiny-wan's) and cases.json: the calls and the
error Diffusers raised, or (where it runs) its final latents.
"""
from __future__ import annotations

import torch

from _common import FIXTURES, deterministic, fresh_dir, write_json
from make_tiny_wan import UNIPC_CFG, perturb_constants, save_pipeline


def main() -> None:
    deterministic(0)
    from diffusers import UniPCMultistepScheduler, WanPipeline, WanTransformer3DModel

    root = fresh_dir(FIXTURES / "wan-refusals")
    folder = root / "expand-p1"
    base = WanPipeline.from_pretrained(str(FIXTURES / "tiny-wan"), dtype=torch.float32)
    torch.manual_seed(1)
    tr = WanTransformer3DModel(patch_size=(1, 1, 1), num_attention_heads=1, attention_head_dim=6, in_channels=16,
                               out_channels=16, text_dim=8, freq_dim=8, ffn_dim=8, num_layers=1,
                               rope_max_seq_len=32).eval()
    perturb_constants(tr, torch.Generator().manual_seed(2))
    pipe = WanPipeline(tokenizer=base.tokenizer, text_encoder=base.text_encoder, transformer=tr, vae=base.vae,
                       scheduler=UniPCMultistepScheduler(**UNIPC_CFG, flow_shift=5.0), expand_timesteps=True)
    save_pipeline(pipe, folder, {"tokenizer": "../../tiny-flux/tokenizer_2", "text_encoder": "../../tiny-wan/text_encoder",
                                 "vae": "../../tiny-wan/vae"})
    pipe = WanPipeline.from_pretrained(str(folder), dtype=torch.float32)
    cases = []
    for call in (dict(prompt="a cat", height=16, width=16, num_frames=1, num_inference_steps=1, guidance_scale=1.0),
                 dict(prompt="a cat", height=32, width=48, num_frames=5, num_inference_steps=2, guidance_scale=4.0)):
        try:
            lat = pipe(**call, generator=torch.Generator("cpu").manual_seed(0), output_type="latent").frames
            cases.append({"folder": "expand-p1", "seed": 0, **call, "latents": lat.flatten().tolist(),
                          "latents_shape": list(lat.shape)})
        except Exception as e:  # noqa: BLE001
            cases.append({"folder": "expand-p1", "seed": 0, **call,
                          "diffusers_error": f"{type(e).__name__}: {str(e).splitlines()[0]}"})
    write_json(root / "cases.json", cases)


if __name__ == "__main__":
    main()
