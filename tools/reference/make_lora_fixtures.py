"""tests/fixtures/lora/: tiny LoRA adapters for the tiny dev pipeline (tests/fixtures/tiny-flux), one file per
format, each written with the keys that format's trainer writes, and the final latents Diffusers + PEFT produce
with them loaded (FluxPipeline.load_lora_weights, set_adapters, fuse_lora), on the CPU in float32.

Files
- peft_a.safetensors: Diffusers/PEFT format as FluxPipeline.save_lora_weights writes it: transformer.*.lora_A/B
  (r=4, lora_alpha=8 with a rank_pattern and an alpha_pattern) and text_encoder.* (CLIP, r=2, lora_alpha=4), the
  LoraConfig in the "lora_adapter_metadata" header entry.
- peft_b_alpha.safetensors: Diffusers keys with per-module network alphas (transformer.<module>.alpha), no metadata
  (as many Hub FLUX LoRAs are): alpha from the file.
- kohya.safetensors: sd-scripts (kohya) naming, lora_unet_* / lora_te1_*, lora_down/lora_up/.alpha, FLUX's fused
  qkv (dense and block-sparse up weights) and the final layer's scale/shift swap. kohya_converted.safetensors: the
  state dict Diffusers' FluxLoraLoaderMixin.lora_state_dict converts it to (the key-by-key reference).
  single_blocks_*_linear1 is left out: Diffusers splits it with FLUX.1-dev's hard-coded sizes
  ([3072, 3072, 3072, 12288]), which the tiny model does not have.
- comfy.safetensors: ComfyUI naming (diffusion_model.* with lora_down/lora_up/alpha, text_encoders.clip_l.*).
- xlabs.safetensors: XLabs naming (double_blocks.N.processor.{qkv,proj}_lora{1,2}.{down,up}.weight).
- lokr.safetensors: a LyCORIS LoKr file (lokr_w1/lokr_w2): Diffusers does not load LoKr into FLUX.1 (only
  Flux2/Z-Image), so diffq refuses it with an error naming the keys.
- unknown.safetensors: Diffusers keys plus one module the transformer does not have.

latents.safetensors (packed final latents, caught with callback_on_step_end):
  none, peft_a, peft_b_alpha, kohya, comfy, xlabs: each adapter alone, weight 1;
  two: peft_a and peft_b_alpha with set_adapters(["a", "b"], [0.7, -0.4]);
  fused: the same two, then fuse_lora(lora_scale=0.8);
cases.json: the call, the adapter weights, the fuse scale.

Run: cd tools/reference && CUDA_VISIBLE_DEVICES= HF_HUB_OFFLINE=1 ../.venv/bin/python make_lora_fixtures.py
"""
from __future__ import annotations

import json
import traceback

from _common import FIXTURES, deterministic, dir_size, fresh_dir, save_tensors, write_json

CALL = dict(prompt="A photo of a Cat sitting on a RED chair, 4k!!", height=32, width=32, num_inference_steps=2,
            guidance_scale=3.5, seed=0, max_sequence_length=64)
TWO = dict(names=["a", "b"], weights=[0.7, -0.4])
FUSE_SCALE = 0.8


def main() -> None:
    deterministic(0)
    import torch
    from diffusers import FluxPipeline
    from peft import LoraConfig
    from peft.utils import get_peft_model_state_dict
    from safetensors.torch import save_file

    # transformers 5.24 asks for peft >= 0.22 in its PEFT integration (text-encoder adapters) while the pinned
    # stack has peft 0.21.2 (tools/reference/requirements.txt): the version gate is lifted, the code paths used
    # here (inject, load_adapter, set/merge adapters) exist in 0.21.2.
    import transformers.integrations.peft as tpeft
    tpeft.check_peft_version = lambda *a, **kw: None

    tiny = FIXTURES / "tiny-flux"
    out = fresh_dir(FIXTURES / "lora")
    kwargs = {k: v for k, v in CALL.items() if k != "seed"}

    def load(quant=None):
        p = FluxPipeline.from_pretrained(tiny, dtype=torch.float32, quantization_config=quant)
        p.set_progress_bar_config(disable=True)
        return p

    def run(pipe):
        final = {}

        def catch(p, i, t, cb):
            final["latents"] = cb["latents"].clone()
            return {}

        if True:  # (no torch.no_grad here: bitsandbytes' CPU 4-bit path breaks under it; __call__ has its own)
            pipe(**kwargs, generator=torch.Generator("cpu").manual_seed(CALL["seed"]), output_type="latent",
                 callback_on_step_end=catch, callback_on_step_end_tensor_inputs=["latents"])
        return final["latents"]

    def rnd(*shape, s=0.3):
        return (torch.randn(*shape) * s).float()

    pipe = load()
    tr = pipe.transformer
    D = tr.inner_dim
    sd = {n: p for n, p in tr.state_dict().items()}

    def shape(mod):  # (out, in) of a transformer Linear
        return tuple(sd[mod + ".weight"].shape)

    # ---- peft_a: PEFT adapters saved by save_lora_weights (LoraConfig in the header) ----
    t_targets = ["to_q", "to_k", "to_v", "to_out.0", "add_q_proj", "add_v_proj", "to_add_out", "proj_out",
                 "ff.net.0.proj", "norm1.linear", "proj_mlp", "x_embedder", "context_embedder"]
    t_cfg = LoraConfig(r=4, lora_alpha=8, target_modules=t_targets, init_lora_weights=False,
                       rank_pattern={"proj_mlp": 2}, alpha_pattern={"x_embedder": 2})
    tr.add_adapter(t_cfg, adapter_name="mk")
    te = pipe.text_encoder
    te_cfg = LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "k_proj", "v_proj", "out_proj", "fc1"],
                        init_lora_weights=False)
    te.add_adapter(te_cfg, adapter_name="mk")
    with torch.no_grad():  # B random too (init_lora_weights=False already), scaled to move the output visibly
        for n, p in list(tr.named_parameters()) + list(te.named_parameters()):
            if "lora_" in n:
                p.copy_(rnd(*p.shape))
    t_sd = get_peft_model_state_dict(tr, adapter_name="mk")
    te_sd = get_peft_model_state_dict(te, adapter_name="mk")

    def meta(cfg):
        d = cfg.to_dict()
        return {k: (sorted(v) if isinstance(v, (set, list)) else v) for k, v in d.items()
                if k in ("r", "lora_alpha", "rank_pattern", "alpha_pattern", "target_modules", "use_dora",
                         "lora_bias", "init_lora_weights")}

    FluxPipeline.save_lora_weights(out, transformer_lora_layers=t_sd, text_encoder_lora_layers=te_sd,
                                   weight_name="peft_a.safetensors",
                                   transformer_lora_adapter_metadata=meta(t_cfg),
                                   text_encoder_lora_adapter_metadata=meta(te_cfg))
    del pipe, tr, te

    # ---- peft_b_alpha: Diffusers keys + network alphas, no metadata ----
    b = {}
    for i, m in enumerate(["transformer_blocks.0.attn.to_q", "transformer_blocks.1.attn.to_k",
                           "transformer_blocks.0.ff_context.net.2", "single_transformer_blocks.1.proj_out",
                           "single_transformer_blocks.0.attn.to_v", "norm_out.linear",
                           "time_text_embed.timestep_embedder.linear_1"]):
        o, n = shape(m)
        b[f"transformer.{m}.lora_A.weight"] = rnd(2, n)
        b[f"transformer.{m}.lora_B.weight"] = rnd(o, 2)
        b[f"transformer.{m}.alpha"] = torch.tensor(1.0 if i % 3 else 3.0)
    save_file(b, str(out / "peft_b_alpha.safetensors"))

    # ---- kohya (sd-scripts) ----
    k = {}

    def kohya(name, o, n, r, alpha, up=None):
        k[f"{name}.lora_down.weight"] = rnd(r, n)
        k[f"{name}.lora_up.weight"] = up if up is not None else rnd(o, r)
        if alpha is not None:
            k[f"{name}.alpha"] = torch.tensor(float(alpha))

    for i in range(2):
        kohya(f"lora_unet_double_blocks_{i}_img_attn_qkv", 3 * D, D, 4, 2)  # dense up: down copied to q, k, v
        sparse = torch.zeros(3 * D, 6)  # block-diagonal up: Diffusers chunks the down weight (rank 2 each)
        for j in range(3):
            sparse[j * D:(j + 1) * D, 2 * j:2 * j + 2] = rnd(D, 2)
        kohya(f"lora_unet_double_blocks_{i}_txt_attn_qkv", 3 * D, D, 6, 3, up=sparse)
        kohya(f"lora_unet_double_blocks_{i}_img_attn_proj", D, D, 4, 8)
        kohya(f"lora_unet_double_blocks_{i}_img_mlp_0", *shape(f"transformer_blocks.{i}.ff.net.0.proj"), 4, 1)
        kohya(f"lora_unet_double_blocks_{i}_txt_mlp_2", *shape(f"transformer_blocks.{i}.ff_context.net.2"), 4, None)
        kohya(f"lora_unet_double_blocks_{i}_txt_mod_lin", *shape(f"transformer_blocks.{i}.norm1_context.linear"), 4, 4)
        kohya(f"lora_unet_single_blocks_{i}_linear2", *shape(f"single_transformer_blocks.{i}.proj_out"), 4, 2)
        kohya(f"lora_unet_single_blocks_{i}_modulation_lin", *shape(f"single_transformer_blocks.{i}.norm.linear"), 4, 2)
    kohya("lora_unet_img_in", *shape("x_embedder"), 4, 2)
    kohya("lora_unet_txt_in", *shape("context_embedder"), 4, 2)
    kohya("lora_unet_time_in_in_layer", *shape("time_text_embed.timestep_embedder.linear_1"), 4, 2)
    kohya("lora_unet_vector_in_out_layer", *shape("time_text_embed.text_embedder.linear_2"), 4, 2)
    kohya("lora_unet_guidance_in_in_layer", *shape("time_text_embed.guidance_embedder.linear_1"), 4, 2)
    kohya("lora_unet_final_layer_linear", *shape("proj_out"), 4, 2)
    kohya("lora_unet_final_layer_adaLN_modulation_1", *shape("norm_out.linear"), 4, 2)
    te_sd0 = FluxPipeline.from_pretrained(tiny, dtype=torch.float32).text_encoder.state_dict()
    for m in ["self_attn_q_proj", "self_attn_v_proj", "self_attn_out_proj", "mlp_fc1", "mlp_fc2"]:
        w = te_sd0[f"encoder.layers.0.{m.replace('self_attn_', 'self_attn.').replace('mlp_', 'mlp.')}.weight"]
        kohya(f"lora_te1_text_model_encoder_layers_0_{m}", *w.shape, 2, 1)
    save_file(k, str(out / "kohya.safetensors"))
    conv = FluxPipeline.lora_state_dict(str(out / "kohya.safetensors"))
    conv = conv[0] if isinstance(conv, tuple) else conv
    save_tensors(out / "kohya_converted.safetensors", {n: v.clone() for n, v in conv.items()})

    # ---- ComfyUI: the same kind of file under diffusion_model.* / text_encoders.clip_l.* names ----
    c = {}
    for i in range(2):
        for part, mod in [("img_attn.qkv", None), ("img_attn.proj", None), ("txt_mlp.0", f"transformer_blocks.{i}.ff_context.net.0.proj")]:
            o, n = (3 * D, D) if part.endswith("qkv") else ((D, D) if mod is None else shape(mod))
            c[f"diffusion_model.double_blocks.{i}.{part}.lora_down.weight"] = rnd(4, n)
            c[f"diffusion_model.double_blocks.{i}.{part}.lora_up.weight"] = rnd(o, 4)
            c[f"diffusion_model.double_blocks.{i}.{part}.alpha"] = torch.tensor(2.0)
        c[f"diffusion_model.single_blocks.{i}.linear2.lora_down.weight"] = rnd(4, shape(f"single_transformer_blocks.{i}.proj_out")[1])
        c[f"diffusion_model.single_blocks.{i}.linear2.lora_up.weight"] = rnd(D, 4)
        c[f"diffusion_model.single_blocks.{i}.linear2.alpha"] = torch.tensor(8.0)
    # (with out_proj: Diffusers tells the old text-encoder key style by a "to_out_lora" key)
    for m in ["k_proj", "out_proj"]:
        w = te_sd0[f"encoder.layers.1.self_attn.{m}.weight"]
        pre = f"text_encoders.clip_l.transformer.text_model.encoder.layers.1.self_attn.{m}"
        c[f"{pre}.lora_down.weight"] = rnd(2, w.shape[1])
        c[f"{pre}.lora_up.weight"] = rnd(w.shape[0], 2)
        c[f"{pre}.alpha"] = torch.tensor(1.0)
    save_file(c, str(out / "comfy.safetensors"))

    # ---- XLabs ----
    x = {}
    for i in range(2):
        for lora, o in [("qkv_lora1", 3 * D), ("proj_lora1", D), ("qkv_lora2", 3 * D), ("proj_lora2", D)]:
            x[f"double_blocks.{i}.processor.{lora}.down.weight"] = rnd(4, D)
            x[f"double_blocks.{i}.processor.{lora}.up.weight"] = rnd(o, 4)
    save_file(x, str(out / "xlabs.safetensors"))

    # ---- LoKr (refused) and unknown keys (refused) ----
    save_file({"lora_unet_double_blocks_0_img_attn_proj.lokr_w1": rnd(4, 4),
               "lora_unet_double_blocks_0_img_attn_proj.lokr_w2": rnd(8, 8),
               "lora_unet_double_blocks_0_img_attn_proj.alpha": torch.tensor(1.0)}, str(out / "lokr.safetensors"))
    u = {n: v for n, v in b.items() if "transformer_blocks.0.attn.to_q" in n and "single" not in n}
    u["transformer.transformer_blocks.0.attn.to_zz.lora_A.weight"] = rnd(2, D)
    u["transformer.transformer_blocks.0.attn.to_zz.lora_B.weight"] = rnd(D, 2)
    save_file(u, str(out / "unknown.safetensors"))

    # ---- reference outputs ----
    lat = {}
    pipe = load()
    lat["none"] = run(pipe)
    print("text encoder modules:", [n for n, _ in pipe.text_encoder.named_modules()][:6])
    for name in ["peft_a", "peft_b_alpha", "kohya", "comfy", "xlabs"]:
        pipe = load()
        pipe.load_lora_weights(str(out / f"{name}.safetensors"), adapter_name=name)
        lat[name] = run(pipe)
    # Diffusers' kohya conversion names the img_in/txt_in/time_in/vector_in/guidance_in/final_layer targets
    # without the "transformer." prefix, and load_lora_weights then drops them without a word. kohya_all: what
    # the file means, those keys given the prefix (diffq applies them, and says Diffusers would not).
    fixed = {(n if n.startswith(("transformer.", "text_encoder.")) else "transformer." + n): v for n, v in conv.items()}
    pipe = load()
    pipe.load_lora_weights(fixed, adapter_name="kohya")
    lat["kohya_all"] = run(pipe)
    pipe = load()
    pipe.load_lora_weights(str(out / "peft_a.safetensors"), adapter_name="a")
    pipe.load_lora_weights(str(out / "peft_b_alpha.safetensors"), adapter_name="b")
    pipe.set_adapters(TWO["names"], adapter_weights=TWO["weights"])
    lat["two"] = run(pipe)
    pipe.fuse_lora(components=["transformer", "text_encoder"], lora_scale=FUSE_SCALE)
    lat["fused"] = run(pipe)

    cases = {"call": CALL, "two": TWO, "fuse_scale": FUSE_SCALE}
    # nf4 base + LoRA: make_lora_nf4.py (Diffusers + PEFT + bitsandbytes) -> tests/fixtures/lora-nf4.
    save_tensors(out / "latents.safetensors", lat)
    write_json(out / "cases.json", cases)
    for n, v in lat.items():
        print(n, float((v - lat["none"]).abs().max()) if n != "none" else "")
    print(f"lora: {dir_size(out)} bytes")


if __name__ == "__main__":
    main()
