"""tests/fixtures/lora-wan/: tiny LoRA adapters for the tiny Wan pipelines (tests/fixtures/tiny-wan, tiny-wan22, by
path) and the final latents Diffusers + PEFT produce with them loaded (WanPipeline.load_lora_weights, set_adapters,
fuse_lora; load_into_transformer_2 on the Wan2.2 two-expert folder), on the CPU in float32.

Files
- peft.safetensors: Diffusers/PEFT format as WanPipeline.save_lora_weights writes it (transformer.*.lora_A/B, r=4,
  lora_alpha=8 with a rank_pattern and an alpha_pattern, the LoraConfig in the "lora_adapter_metadata" header).
- original.safetensors: the original Wan / ComfyUI naming (diffusion_model.blocks.N.self_attn.q.lora_down.weight,
  .lora_up.weight, .alpha; cross_attn, ffn.0/2, head.head, text_embedding, time_embedding, time_projection), .diff_b
  bias deltas on some of them (-> lora_B.bias, PEFT's lora_bias) and norm .diff keys (zeros, dropped as Diffusers
  drops them). original_converted.safetensors: the state dict Diffusers'
  WanLoraLoaderMixin.lora_state_dict converts it to (key-by-key reference).
- latents.safetensors (final latents [B, C, T, h, w], output_type="latent"):
  none, peft, original: tiny-wan, each adapter alone, weight 1;
  two: both, set_adapters(["p", "o"], [0.6, -0.5]); fused: the same two, then fuse_lora(lora_scale=1.0);
  wan22_none, wan22_t2: tiny-wan22 without / with peft.safetensors loaded with load_into_transformer_2=True.
cases.json: the calls, the adapter weights.

Run: cd tools/reference && CUDA_VISIBLE_DEVICES= HF_HUB_OFFLINE=1 ../.venv/bin/python make_wan_lora_fixtures.py
"""
from __future__ import annotations

from _common import FIXTURES, deterministic, dir_size, fresh_dir, save_tensors, write_json

CALL = dict(prompt="A photo of a Cat sitting on a RED chair, 4k!!", height=32, width=32, num_frames=5,
            num_inference_steps=2, guidance_scale=4.0, seed=0, max_sequence_length=16)
CALL22 = dict(CALL, num_inference_steps=4, guidance_scale_2=3.0, seed=3)
TWO = dict(names=["p", "o"], weights=[0.6, -0.5])


def main() -> None:
    deterministic(0)
    import torch
    from diffusers import WanPipeline
    from peft import LoraConfig
    from peft.utils import get_peft_model_state_dict
    from safetensors.torch import save_file

    out = fresh_dir(FIXTURES / "lora-wan")

    def load(folder):
        p = WanPipeline.from_pretrained(FIXTURES / folder, torch_dtype=torch.float32)
        p.set_progress_bar_config(disable=True)
        return p

    def run(pipe, call):
        kw = {k: v for k, v in call.items() if k != "seed"}
        return pipe(**kw, generator=torch.Generator("cpu").manual_seed(call["seed"]), output_type="latent").frames

    def rnd(*shape, s=0.3):
        return (torch.randn(*shape) * s).float()

    pipe = load("tiny-wan")
    tr = pipe.transformer
    sd = dict(tr.state_dict())
    lat = {"none": run(pipe, CALL)}

    # ---- peft: PEFT adapter saved by save_lora_weights ----
    targets = ["to_q", "to_k", "to_v", "to_out.0", "ffn.net.0.proj", "ffn.net.2", "proj_out", "time_proj",
               "linear_1"]
    cfg = LoraConfig(r=4, lora_alpha=8, target_modules=targets, init_lora_weights=False,
                     rank_pattern={"ffn.net.2": 2}, alpha_pattern={"proj_out": 2})
    tr.add_adapter(cfg, adapter_name="mk")
    with torch.no_grad():
        for n, p in tr.named_parameters():
            if "lora_" in n:
                p.copy_(rnd(*p.shape))
    t_sd = get_peft_model_state_dict(tr, adapter_name="mk")
    meta = {k: (sorted(v) if isinstance(v, (set, list)) else v) for k, v in cfg.to_dict().items()
            if k in ("r", "lora_alpha", "rank_pattern", "alpha_pattern", "target_modules", "use_dora", "lora_bias",
                     "init_lora_weights")}
    WanPipeline.save_lora_weights(out, transformer_lora_layers=t_sd, weight_name="peft.safetensors",
                                  transformer_lora_adapter_metadata=meta)
    del pipe, tr

    # ---- original / ComfyUI naming ----
    o = {}

    def orig(name, mod, r, alpha, bias=False):
        w = sd[mod + ".weight"]
        o[f"diffusion_model.{name}.lora_down.weight"] = rnd(r, w.shape[1])
        o[f"diffusion_model.{name}.lora_up.weight"] = rnd(w.shape[0], r)
        if alpha is not None:
            o[f"diffusion_model.{name}.alpha"] = torch.tensor(float(alpha))
        if bias:  # LightX2V-style bias deltas: lora_B.bias (PEFT lora_bias) after Diffusers' conversion
            o[f"diffusion_model.{name}.diff_b"] = rnd(w.shape[0])

    for i in range(2):
        for j, (a, c) in enumerate(zip("qkvo", ["to_q", "to_k", "to_v", "to_out.0"])):
            orig(f"blocks.{i}.self_attn.{a}", f"blocks.{i}.attn1.{c}", 4, 2.0 if j % 2 else 8.0, bias=j == 0)
            orig(f"blocks.{i}.cross_attn.{a}", f"blocks.{i}.attn2.{c}", 2, 3.0 if i else None)
        orig(f"blocks.{i}.ffn.0", f"blocks.{i}.ffn.net.0.proj", 4, 4.0)
        orig(f"blocks.{i}.ffn.2", f"blocks.{i}.ffn.net.2", 4, None, bias=True)
        o[f"diffusion_model.blocks.{i}.norm3.diff"] = torch.zeros(sd[f"blocks.{i}.norm2.weight"].shape)
    orig("head.head", "proj_out", 2, None, bias=True)
    orig("text_embedding.0", "condition_embedder.text_embedder.linear_1", 2, None)
    orig("time_embedding.2", "condition_embedder.time_embedder.linear_2", 2, None)
    orig("time_projection.1", "condition_embedder.time_proj", 2, None)
    save_file(o, str(out / "original.safetensors"))
    conv = WanPipeline.lora_state_dict(str(out / "original.safetensors"))
    save_tensors(out / "original_converted.safetensors", {k: v.contiguous() for k, v in conv.items()})

    def with_loras(names, weights=None, fuse=None):
        p = load("tiny-wan")
        files = {"peft": "peft.safetensors", "original": "original.safetensors", "p": "peft.safetensors",
                 "o": "original.safetensors"}
        for n in names:
            # low_cpu_mem_usage=False: with the default (True) PEFT leaves the lora_B biases of the layers that
            # have no .diff_b on the meta device (lora_bias is per adapter) and the forward fails; this way they
            # are zeros, as PEFT initialises them.
            p.load_lora_weights(str(out / files[n]), adapter_name=n, low_cpu_mem_usage=False)
        p.set_adapters(names, weights or [1.0] * len(names))
        if fuse is not None:
            p.fuse_lora(lora_scale=fuse, adapter_names=names)
        return run(p, CALL)

    lat["peft"] = with_loras(["peft"])
    lat["original"] = with_loras(["original"])
    lat["two"] = with_loras(TWO["names"], TWO["weights"])
    lat["fused"] = with_loras(TWO["names"], TWO["weights"], fuse=1.0)

    p22 = load("tiny-wan22")
    lat["wan22_none"] = run(p22, CALL22)
    p22.load_lora_weights(str(out / "peft.safetensors"), adapter_name="t2", load_into_transformer_2=True)
    lat["wan22_t2"] = run(p22, CALL22)

    save_tensors(out / "latents.safetensors", {k: v.contiguous() for k, v in lat.items()})
    write_json(out / "cases.json", {"call": CALL, "call22": CALL22, "two": TWO, "fuse_scale": 1.0})
    for k, v in lat.items():
        if not k.endswith("none"):
            base = lat["wan22_none"] if k.startswith("wan22") else lat["none"]
            print(k, "moves the output by", float((v - base).abs().max() / base.abs().max()))
    print("lora-wan:", dir_size(out), "bytes")


if __name__ == "__main__":
    main()
