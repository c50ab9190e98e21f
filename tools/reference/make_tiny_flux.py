"""Tiny random-weight FLUX.1 pipelines built from the REAL diffusers/transformers classes, plus reference
tensors computed by diffusers on the CPU in float32 (and bfloat16 runs of the text encoders and the VAE on
the same inputs: reference/text_encoders_bf16.safetensors, reference/vae_bf16.safetensors).

Writes
  tests/fixtures/tiny-flux/            FluxPipeline.save_pretrained folder (dev-style, guidance_embeds)
  tests/fixtures/tiny-flux/reference/  params.json + *.safetensors reference tensors (see README.md)
  tests/fixtures/tiny-flux-schnell/    schnell-style sibling: own transformer (no guidance) + scheduler;
                                       text encoders, tokenizers and VAE are symlinks to ../tiny-flux/
  tests/fixtures/tiny-flux-schnell/reference/  its 2-step generation

Sizes (the 25 MB fixture budget): the token embeddings dominate because the real vocabularies are kept
(CLIP 49408, T5 32128). Text encoders therefore use hidden 8 and are saved in float16 (0.8 MB + 0.5 MB);
the references load everything back with torch_dtype=float32, so fp16 -> fp32 upcast is part of the path.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import torch

from _common import FIXTURES, deterministic, dir_size, fresh_dir, save_tensors, write_json
import _tokenizers as T

SEED = 0
PROMPT = "A photo of a Cat sitting on a RED chair, 4k!!"
HEIGHT = WIDTH = 32
STEPS = 2
GUIDANCE = 3.5

CLIP_CFG = dict(vocab_size=49408, hidden_size=8, intermediate_size=37, num_hidden_layers=2,
                num_attention_heads=2, max_position_embeddings=77, hidden_act="quick_gelu",
                projection_dim=8, layer_norm_eps=1e-5, attention_dropout=0.0,
                # clip-vit-large-patch14 keeps the legacy ids (eos_token_id 2 -> pooled = argmax(ids))
                bos_token_id=0, eos_token_id=2, pad_token_id=1)
T5_CFG = dict(vocab_size=32128, d_model=8, d_kv=8, d_ff=37, num_layers=2, num_heads=2,
              relative_attention_num_buckets=32, relative_attention_max_distance=128,
              feed_forward_proj="gated-gelu", dropout_rate=0.0, layer_norm_epsilon=1e-6,
              tie_word_embeddings=False, is_encoder_decoder=False, use_cache=False,
              pad_token_id=0, eos_token_id=1, decoder_start_token_id=0)
FLUX_CFG = dict(patch_size=1, in_channels=16, out_channels=None, num_layers=2, num_single_layers=2,
                attention_head_dim=16, num_attention_heads=2, joint_attention_dim=8,
                pooled_projection_dim=8, axes_dims_rope=(4, 6, 6))
VAE_CFG = dict(in_channels=3, out_channels=3,
               down_block_types=("DownEncoderBlock2D", "DownEncoderBlock2D"),
               up_block_types=("UpDecoderBlock2D", "UpDecoderBlock2D"),
               block_out_channels=(16, 32), layers_per_block=1, act_fn="silu", latent_channels=4,
               norm_num_groups=8, sample_size=32, scaling_factor=0.3611, shift_factor=0.1159,
               force_upcast=True, use_quant_conv=False, use_post_quant_conv=False,
               mid_block_add_attention=True)
SCHED_DEV = dict(num_train_timesteps=1000, shift=3.0, use_dynamic_shifting=True, base_shift=0.5,
                 max_shift=1.15, base_image_seq_len=256, max_image_seq_len=4096)
SCHED_SCHNELL = dict(num_train_timesteps=1000, shift=1.0, use_dynamic_shifting=False, base_shift=0.5,
                     max_shift=1.15, base_image_seq_len=256, max_image_seq_len=4096)

SHARED = ["text_encoder", "text_encoder_2", "tokenizer", "tokenizer_2", "vae"]


def perturb_constants(module: torch.nn.Module, gen: torch.Generator) -> None:
    """Norm weights start at 1 and biases at 0; give every constant-initialised parameter some noise so a
    C++ port that ignores one of them fails the comparison."""
    with torch.no_grad():
        for _, p in sorted(module.named_parameters(), key=lambda kv: kv[0]):
            if p.numel() == 1 or bool((p == p.flatten()[0]).all()):
                p.add_(0.1 * torch.randn(p.shape, generator=gen, dtype=p.dtype))


def build_components():
    from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, FluxTransformer2DModel
    from transformers import CLIPTextConfig, CLIPTextModel, T5Config, T5EncoderModel

    gen = torch.Generator().manual_seed(SEED)
    torch.manual_seed(SEED)
    clip = CLIPTextModel(CLIPTextConfig(**CLIP_CFG)).eval()
    perturb_constants(clip, gen)
    torch.manual_seed(SEED + 1)
    t5 = T5EncoderModel(T5Config(**T5_CFG)).eval()
    perturb_constants(t5, gen)
    torch.manual_seed(SEED + 2)
    dev = FluxTransformer2DModel(guidance_embeds=True, **FLUX_CFG).eval()
    perturb_constants(dev, gen)
    torch.manual_seed(SEED + 3)
    schnell = FluxTransformer2DModel(guidance_embeds=False, **FLUX_CFG).eval()
    perturb_constants(schnell, gen)
    torch.manual_seed(SEED + 4)
    vae = AutoencoderKL(**VAE_CFG).eval()
    perturb_constants(vae, gen)
    return dict(
        text_encoder=clip.to(torch.float16), text_encoder_2=t5.to(torch.float16), vae=vae,
        dev=dev, schnell=schnell,
        sched_dev=FlowMatchEulerDiscreteScheduler(**SCHED_DEV),
        sched_schnell=FlowMatchEulerDiscreteScheduler(**SCHED_SCHNELL))


def build_tokenizers(stage: Path):
    """Real CLIP / T5 tokenizers (see _tokenizers.py). Returns (clip, t5, files to lay down later)."""
    from transformers import CLIPTokenizer, T5Tokenizer

    vocab, merges = T.clip_vocab_and_merges()
    clip_dir, t5_dir = stage / "clip", stage / "t5"
    clip_dir.mkdir()
    t5_dir.mkdir()
    (clip_dir / "vocab.json").write_text(T.vocab_json(vocab))
    (clip_dir / "merges.txt").write_text(T.merges_txt(merges))
    tj = T.t5_tokenizer_json()
    (t5_dir / "tokenizer.json").write_bytes(tj)
    (t5_dir / "spiece.model").write_bytes(T.t5_spiece_model(tj))
    T.check_t5_spiece(t5_dir / "spiece.model", t5_dir / "tokenizer.json")
    clip_tok = CLIPTokenizer.from_pretrained(str(clip_dir), model_max_length=77)
    t5_tok = T5Tokenizer.from_pretrained(str(t5_dir), model_max_length=512)
    ids = clip_tok("a photo of a cat").input_ids
    assert ids == [49406, 320, 1125, 539, 320, 2368, 49407], ids
    assert t5_tok("a photo of a cat").input_ids == [3, 9, 1202, 13, 3, 9, 1712, 1]
    return clip_tok, t5_tok, clip_dir, t5_dir


def lay_down_tokenizers(folder: Path, clip_dir: Path, t5_dir: Path) -> None:
    """transformers 5 save_pretrained writes only tokenizer.json + tokenizer_config.json. Real FLUX
    checkpoints carry vocab.json/merges.txt (CLIP, no tokenizer.json) and spiece.model + tokenizer.json
    (T5). Keep save_pretrained's tokenizer_config.json files, use the Hub file set otherwise (the CLIP
    tokenizer.json would also cost 3.6 MB)."""
    tok = folder / "tokenizer"
    (tok / "tokenizer.json").unlink()
    for f in ("vocab.json", "merges.txt"):
        (tok / f).write_bytes((clip_dir / f).read_bytes())
    (folder / "tokenizer_2" / "spiece.model").write_bytes((t5_dir / "spiece.model").read_bytes())


def capture(module: torch.nn.Module, name: str, store: dict, log: list | None = None):
    def hook(_m, args, kwargs, out):
        outs = out if isinstance(out, (tuple, list)) else (out,)
        for i, o in enumerate(outs):
            if torch.is_tensor(o):
                key = name if len(outs) == 1 else f"{name}.{i}"
                store[key] = o.detach().clone()
        if log is not None:
            log.append((args, kwargs, out))
    return module.register_forward_hook(hook, with_kwargs=True)


def ref_text_encoders(pipe, out: dict, params: dict) -> None:
    """CLIP/T5 exactly as FluxPipeline._get_clip_prompt_embeds / _get_t5_prompt_embeds call them."""
    clip_in = pipe.tokenizer([PROMPT], padding="max_length", max_length=pipe.tokenizer_max_length,
                             truncation=True, return_overflowing_tokens=False, return_length=False,
                             return_tensors="pt")
    t5_in = pipe.tokenizer_2([PROMPT], padding="max_length", max_length=512, truncation=True,
                             return_length=False, return_overflowing_tokens=False, return_tensors="pt")
    with torch.no_grad():
        c = pipe.text_encoder(clip_in.input_ids, output_hidden_states=False)
        t = pipe.text_encoder_2(t5_in.input_ids, output_hidden_states=False)[0]
        prompt_embeds, pooled, text_ids = pipe.encode_prompt(PROMPT, None, max_sequence_length=512)
    assert torch.equal(pooled, c.pooler_output) and torch.equal(prompt_embeds, t)
    out.update({"clip_input_ids": clip_in.input_ids, "clip_last_hidden_state": c.last_hidden_state,
                "clip_pooled": c.pooler_output, "t5_input_ids": t5_in.input_ids,
                "t5_last_hidden_state": t, "text_ids": text_ids})
    # Tokenizer-only cases (ids without the padding) for the C++ tokenizers.
    params["tokenizer_cases"] = [
        {"text": p, "clip_ids": pipe.tokenizer(p).input_ids, "t5_ids": pipe.tokenizer_2(p).input_ids}
        for p in T.SAMPLE_PROMPTS]


def ref_text_encoders_bf16(bpipe, fp32: dict, out: dict) -> None:
    """The same CLIP/T5 calls as ref_text_encoders, with the pipeline loaded in bfloat16
    (FluxPipeline.from_pretrained(dir, dtype=torch.bfloat16): the fp16 files cast to bf16; T5 keeps "wo"
    in float32 only for float16 loads, so it is bf16 here). Same token ids as the float32 reference."""
    assert bpipe.text_encoder_2.encoder.block[0].layer[1].DenseReluDense.wo.weight.dtype == torch.bfloat16
    with torch.no_grad():
        c = bpipe.text_encoder(fp32["clip_input_ids"], output_hidden_states=False)
        t = bpipe.text_encoder_2(fp32["t5_input_ids"], output_hidden_states=False)[0]
        prompt_embeds, pooled, _ = bpipe.encode_prompt(PROMPT, None, max_sequence_length=512)
    assert torch.equal(pooled, c.pooler_output) and torch.equal(prompt_embeds, t)
    assert c.last_hidden_state.dtype == torch.bfloat16 and t.dtype == torch.bfloat16
    out.update({"clip_last_hidden_state": c.last_hidden_state, "clip_pooled": c.pooler_output,
                "t5_last_hidden_state": t})


def ref_vae_bf16(bvae, fp32: dict, out: dict) -> None:
    """The float32 reference's decode/encode inputs (vae.safetensors) cast to bf16, through the VAE loaded
    in bfloat16 by the pipeline (FluxPipeline decodes in the VAE's dtype: no force_upcast)."""
    bf16 = torch.bfloat16
    with torch.no_grad():
        out["decode.out"] = bvae.decode(fp32["decode.in"].to(bf16), return_dict=False)[0]
        dist = bvae.encode(fp32["encode.in"].to(bf16)).latent_dist
        out["encode.mean"] = dist.mean
        out["encode.logvar"] = dist.logvar
    assert all(v.dtype == bf16 for v in out.values())


def ref_transformer(transformer, out: dict) -> None:
    """One forward, batch 2 (distinct timesteps/guidance), 24 text tokens, 8x8 image tokens, with the
    per-block intermediates."""
    g = torch.Generator().manual_seed(1234)
    b, n_txt, h2, w2 = 2, 24, 8, 8
    d_in, d_txt, d_pool = FLUX_CFG["in_channels"], FLUX_CFG["joint_attention_dim"], FLUX_CFG["pooled_projection_dim"]
    inp = {
        "hidden_states": torch.randn(b, h2 * w2, d_in, generator=g),
        "encoder_hidden_states": torch.randn(b, n_txt, d_txt, generator=g),
        "pooled_projections": torch.randn(b, d_pool, generator=g),
        "timestep": torch.tensor([0.8, 0.35]),          # what the pipeline passes: t / 1000
        "guidance": torch.tensor([3.5, 1.0]),
        "txt_ids": torch.zeros(n_txt, 3),
    }
    ids = torch.zeros(h2, w2, 3)
    ids[..., 1] += torch.arange(h2)[:, None]
    ids[..., 2] += torch.arange(w2)[None, :]
    inp["img_ids"] = ids.reshape(h2 * w2, 3)
    inter: dict = {}
    hooks = [capture(transformer.x_embedder, "x_embedder", inter),
             capture(transformer.context_embedder, "context_embedder", inter),
             capture(transformer.time_text_embed, "temb", inter),
             capture(transformer.pos_embed, "rope", inter),
             capture(transformer.norm_out, "norm_out", inter)]
    for i, blk in enumerate(transformer.transformer_blocks):
        hooks.append(capture(blk, f"transformer_blocks.{i}", inter))  # .0 context, .1 image
    for i, blk in enumerate(transformer.single_transformer_blocks):
        hooks.append(capture(blk, f"single_transformer_blocks.{i}", inter))
    with torch.no_grad():
        y = transformer(**inp, return_dict=False)[0]
    for h in hooks:
        h.remove()
    out.update({f"in.{k}": v for k, v in inp.items()})
    out.update({f"mid.{k}": v for k, v in inter.items()})
    out["out"] = y


def ref_vae(vae, out: dict) -> None:
    g = torch.Generator().manual_seed(4321)
    z = torch.randn(1, 4, 16, 16, generator=g)
    x = torch.rand(1, 3, 32, 32, generator=g) * 2 - 1
    with torch.no_grad():
        out["decode.in"] = z
        out["decode.out"] = vae.decode(z, return_dict=False)[0]
        dist = vae.encode(x).latent_dist
        out["encode.in"] = x
        out["encode.mean"] = dist.mean
        out["encode.logvar"] = dist.logvar


def ref_noise(out: dict, params: dict) -> None:
    """diffusers' randn_tensor with torch.Generator('cpu').manual_seed(seed): float32 and bfloat16 as a
    bf16 pipeline makes them (torch.randn(dtype=bf16); with torch 2.15 it equals the bf16 rounding of the
    f32 draw for every stored shape). numel < 16 ("small") takes torch's scalar path: other values."""
    from diffusers.utils.torch_utils import randn_tensor

    shapes = {"latent": (1, 4, 16, 16), "odd": (2, 16, 3, 5), "small": (1, 15)}
    for seed in (0, 42):
        for sname, shape in shapes.items():
            for dt, dname in ((torch.float32, "f32"), (torch.bfloat16, "bf16")):
                gen = torch.Generator("cpu").manual_seed(seed)
                out[f"seed{seed}.{sname}.{dname}"] = randn_tensor(shape, generator=gen, device=torch.device("cpu"), dtype=dt)
    # FLUX.1 at 1024x1024: [1,16,128,128]; only its first and last 256 values are stored.
    for dt, dname in ((torch.float32, "f32"), (torch.bfloat16, "bf16")):
        gen = torch.Generator("cpu").manual_seed(0)
        full = randn_tensor((1, 16, 128, 128), generator=gen, device=torch.device("cpu"), dtype=dt).flatten()
        out[f"seed0.flux1024.{dname}.head"] = full[:256].clone()
        out[f"seed0.flux1024.{dname}.tail"] = full[-256:].clone()
    params["noise"] = {"shapes": {k: list(v) for k, v in shapes.items()}, "seeds": [0, 42],
                       "flux1024": {"shape": [1, 16, 128, 128], "seed": 0, "stored": "first and last 256"}}


def ref_scheduler(out: dict, params: dict) -> None:
    from diffusers import FlowMatchEulerDiscreteScheduler
    from diffusers.pipelines.flux.pipeline_flux import calculate_shift, retrieve_timesteps

    params["scheduler"] = {}
    for cname, cfg in (("dev", SCHED_DEV), ("schnell", SCHED_SCHNELL)):
        for steps, seq in ((4, 16), (4, 256), (28, 4096), (2, 64)):
            s = FlowMatchEulerDiscreteScheduler(**cfg)
            mu = calculate_shift(seq, s.config.base_image_seq_len, s.config.max_image_seq_len,
                                 s.config.base_shift, s.config.max_shift)
            sig = np.linspace(1.0, 1 / steps, steps)
            ts, _ = retrieve_timesteps(s, steps, "cpu", sigmas=sig, mu=mu)
            key = f"{cname}.steps{steps}.seq{seq}"
            out[f"{key}.sigmas"] = s.sigmas
            out[f"{key}.timesteps"] = ts
            params["scheduler"][key] = {"mu": mu, "num_inference_steps": steps, "image_seq_len": seq}


def ref_generate(pipe, guidance_scale: float, max_seq: int, out: dict) -> dict:
    """A full 2-step 32x32 generation; the transformer's inputs/outputs and the latents of every step."""
    calls: list = []
    hooks = [capture(pipe.transformer, "tf", {}, calls)]
    dec_in: list = []
    hooks.append(pipe.vae.decoder.register_forward_pre_hook(lambda m, a: dec_in.append(a[0].detach().clone())))
    steps_latents: list = []

    def on_step(p, i, t, kw):
        steps_latents.append(kw["latents"].detach().clone())
        return kw

    gen = torch.Generator("cpu").manual_seed(SEED)
    with torch.no_grad():
        img = pipe(PROMPT, height=HEIGHT, width=WIDTH, num_inference_steps=STEPS,
                   guidance_scale=guidance_scale, generator=gen, max_sequence_length=max_seq,
                   output_type="np", callback_on_step_end=on_step,
                   callback_on_step_end_tensor_inputs=["latents"]).images
    for h in hooks:
        h.remove()
    tf_calls = calls
    assert len(tf_calls) == STEPS
    for i, (_a, kw, o) in enumerate(tf_calls):
        out[f"step{i}.latents_in"] = kw["hidden_states"]
        out[f"step{i}.timestep"] = kw["timestep"]
        if i == 0 and kw.get("guidance") is not None:
            out["guidance"] = kw["guidance"]   # the same tensor every step
        out[f"step{i}.noise_pred"] = o[0]
        out[f"step{i}.latents_out"] = steps_latents[i]
    first = tf_calls[0][1]
    out["prompt_embeds"] = first["encoder_hidden_states"]
    out["pooled_prompt_embeds"] = first["pooled_projections"]
    out["txt_ids"] = first["txt_ids"]
    out["img_ids"] = first["img_ids"]
    # final latents (packed) = step{STEPS-1}.latents_out
    out["vae_decoder_in"] = dec_in[0]          # unpacked, /scaling_factor + shift_factor
    out["image_f32"] = torch.from_numpy(img)   # [B, H, W, 3] in [0, 1]
    out["image_u8"] = torch.from_numpy((img * 255).round().astype(np.uint8))
    return {"prompt": PROMPT, "height": HEIGHT, "width": WIDTH, "num_inference_steps": STEPS,
            "guidance_scale": guidance_scale, "seed": SEED, "generator": "torch.Generator('cpu').manual_seed(seed)",
            "max_sequence_length": max_seq, "dtype": "float32", "device": "cpu", "output_type": "np",
            "image_u8": "round(image_f32 * 255)"}


def main() -> None:
    deterministic(SEED)
    from diffusers import FluxPipeline

    dev_dir = fresh_dir(FIXTURES / "tiny-flux")
    schnell_dir = fresh_dir(FIXTURES / "tiny-flux-schnell")
    comps = build_components()
    with tempfile.TemporaryDirectory() as stage:
        clip_tok, t5_tok, clip_dir, t5_dir = build_tokenizers(Path(stage))
        shared = dict(text_encoder=comps["text_encoder"], text_encoder_2=comps["text_encoder_2"],
                      tokenizer=clip_tok, tokenizer_2=t5_tok, vae=comps["vae"])
        FluxPipeline(scheduler=comps["sched_dev"], transformer=comps["dev"], **shared).save_pretrained(
            dev_dir, safe_serialization=True)
        FluxPipeline(scheduler=comps["sched_schnell"], transformer=comps["schnell"], **shared).save_pretrained(
            schnell_dir, safe_serialization=True)
        lay_down_tokenizers(dev_dir, clip_dir, t5_dir)
    for name in SHARED:  # the schnell sibling shares everything but transformer and scheduler
        shutil.rmtree(schnell_dir / name)
        os.symlink(Path("..") / "tiny-flux" / name, schnell_dir / name)

    # ---- references: everything loaded back from the files, float32, CPU ----
    pipe = FluxPipeline.from_pretrained(dev_dir, dtype=torch.float32)
    pipe.set_progress_bar_config(disable=True)
    assert pipe.tokenizer_max_length == 77
    ref_dir = dev_dir / "reference"
    ref_dir.mkdir()
    params: dict = {"prompt": PROMPT, "torch": torch.__version__.split("+")[0]}
    import diffusers, transformers
    params["diffusers"], params["transformers"] = diffusers.__version__, transformers.__version__
    t: dict = {}
    ref_text_encoders(pipe, t, params)
    save_tensors(ref_dir / "text_encoders.safetensors", t)
    t = {}
    ref_transformer(pipe.transformer, t)
    save_tensors(ref_dir / "transformer_forward.safetensors", t)
    t = {}
    ref_vae(pipe.vae, t)
    save_tensors(ref_dir / "vae.safetensors", t)
    # bfloat16 runs of the same models on the same inputs (the bf16 references of a bf16 port)
    bpipe = FluxPipeline.from_pretrained(dev_dir, dtype=torch.bfloat16)
    bpipe.set_progress_bar_config(disable=True)
    fp32 = {}
    ref_text_encoders(pipe, fp32, {})
    t = {}
    ref_text_encoders_bf16(bpipe, fp32, t)
    save_tensors(ref_dir / "text_encoders_bf16.safetensors", t)
    fp32 = {}
    ref_vae(pipe.vae, fp32)
    t = {}
    ref_vae_bf16(bpipe.vae, fp32, t)
    save_tensors(ref_dir / "vae_bf16.safetensors", t)
    del bpipe
    t = {}
    ref_noise(t, params)
    save_tensors(ref_dir / "noise.safetensors", t)
    t = {}
    ref_scheduler(t, params)
    save_tensors(ref_dir / "scheduler.safetensors", t)
    t = {}
    params["generate"] = ref_generate(pipe, GUIDANCE, 512, t)
    save_tensors(ref_dir / "generate.safetensors", t)
    write_json(ref_dir / "params.json", params)

    spipe = FluxPipeline.from_pretrained(schnell_dir, dtype=torch.float32)
    spipe.set_progress_bar_config(disable=True)
    sref = schnell_dir / "reference"
    sref.mkdir()
    t = {}
    sp = ref_generate(spipe, 0.0, 256, t)
    save_tensors(sref / "generate.safetensors", t)
    write_json(sref / "params.json", {"generate": sp})
    print(f"[tiny-flux] {dir_size(dev_dir) / 1e6:.2f} MB, tiny-flux-schnell {dir_size(schnell_dir) / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
