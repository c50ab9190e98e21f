"""The Wan half of the Diffusers/PyTorch peer of `diffq bench` (tools/bench/diffusers_bench.py calls `run_wan`
for builtin:wan-* models and WanPipeline folders; the arguments, combinations and JSON line are that
script's).

Builtin models (the configs of src/models/wan/wan_builtin.cpp): WanTransformer3DModel built from the config
with random weights created in the combination's dtype, Diffusers' _keep_in_fp32_modules then cast to float32
(what from_pretrained(torch_dtype=...) leaves), the quantization applied as Diffusers' quantizer would while
loading (keep-in-fp32 modules left dense), a WanPipeline holding only that transformer and a
UniPCMultistepScheduler with Wan2.1's config (flow_prediction, flow sigmas, flow_shift 3.0), random
prompt_embeds / negative_prompt_embeds [1, 512, text_dim], output_type "latent". CFG is on (guidance_scale 5.0,
the pipeline's default): two transformer passes per step. A WanPipeline folder runs whole from the prompt.

Quantization on the CPU:
- torchao int8dq / int8wo / ...: torchao's quantize_ on the Linear layers outside the keep-in-fp32 modules;
- nf4 / fp4: Diffusers' BitsAndBytesConfig refuses a machine without a GPU (its quantizer's
  validate_environment), although bitsandbytes >= 0.45 runs 4-bit on the CPU: the peer does what Diffusers'
  replace_with_bnb_linear + loading do, by hand: each Linear outside the keep-in-fp32 modules becomes a
  bnb.nn.Linear4bit(quant_type, compute_dtype = the combination's dtype) whose weight is quantized by
  bitsandbytes' CPU path;
- GGUF (q4_K, q8_0, ...): Diffusers only loads pre-made GGUF files (it cannot quantize to GGUF): not run.
"""
from __future__ import annotations

from _peer_timing import prepare_and_time

import time

BUILTIN_WAN = {
    # Wan2.1-1.3B widths with 2 layers; latent grid 5 x 32 x 32 (17 frames at 256x256)
    "wan-small": dict(cfg=dict(num_attention_heads=12, ffn_dim=8960, num_layers=2), size="256x256", frames=17),
    "wan-1.3b-shape": dict(cfg=dict(num_attention_heads=12, ffn_dim=8960, num_layers=30), size="832x480", frames=81),
    "wan-14b-shape": dict(cfg=dict(num_attention_heads=40, ffn_dim=13824, num_layers=40), size="832x480", frames=81),
}
COMMON = dict(patch_size=(1, 2, 2), attention_head_dim=128, in_channels=16, out_channels=16, text_dim=4096,
              freq_dim=256, cross_attn_norm=True, qk_norm="rms_norm_across_heads", eps=1e-6, rope_max_seq_len=1024)
UNIPC = dict(prediction_type="flow_prediction", use_flow_sigmas=True, num_train_timesteps=1000, solver_order=2,
             solver_type="bh2", predict_x0=True, lower_order_final=True, final_sigmas_type="zero", flow_shift=3.0)
TEXT_TOKENS = 512
GUIDANCE = 5.0


def is_wan(model: str) -> bool:
    import json
    import os

    if model.startswith("builtin:"):
        return model.startswith("builtin:wan")
    index = os.path.join(model, "model_index.json")
    return os.path.isfile(index) and json.load(open(index)).get("_class_name") == "WanPipeline"


def defaults(model: str):
    """(size, frames) when not given: the builtin's grid, else WanPipeline's 832x480, 81 frames."""
    if model.startswith("builtin:"):
        b = BUILTIN_WAN[model[len("builtin:"):]]
        return b["size"], b["frames"]
    return "832x480", 81


def keep_fp32(name: str, keep) -> bool:
    return any(part in keep for part in name.split("."))


def quantize_bnb_4bit(transformer, quant: str, dtype, keep):
    import bitsandbytes as bnb
    import torch

    def swap(module, prefix):
        for name, child in list(module.named_children()):
            full = f"{prefix}.{name}" if prefix else name
            if isinstance(child, torch.nn.Linear) and not keep_fp32(full, keep):
                new = bnb.nn.Linear4bit(child.in_features, child.out_features, bias=child.bias is not None,
                                        compute_dtype=dtype, quant_type=quant, device="meta")
                new.weight = bnb.nn.Params4bit(child.weight.data.to(dtype), requires_grad=False, quant_type=quant)
                if child.bias is not None:
                    new.bias = torch.nn.Parameter(child.bias.data.to(dtype), requires_grad=False)
                setattr(module, name, new.to("cpu"))  # .to() quantizes (bitsandbytes' CPU path)
            else:
                swap(child, full)

    swap(transformer, "")


def run_wan(a, dtype, quant, offload, compile_mode, width, height, quantize_transformer, apply_offload):

    import torch
    from diffusers import UniPCMultistepScheduler, WanPipeline, WanTransformer3DModel

    t0 = time.perf_counter()
    kwargs = {}
    keep = WanTransformer3DModel._keep_in_fp32_modules
    if a.model.startswith("builtin:"):
        b = BUILTIN_WAN[a.model[len("builtin:"):]]
        torch.manual_seed(0)
        torch.set_default_dtype(dtype)  # parameters are created in the dtype: no fp32 copy first
        transformer = WanTransformer3DModel(**COMMON, **b["cfg"]).eval()
        torch.set_default_dtype(torch.float32)
        for name, p in transformer.named_parameters():
            if keep_fp32(name, keep):
                p.data = p.data.float()
        if quant in ("nf4", "fp4"):
            quantize_bnb_4bit(transformer, quant, dtype, keep)
        elif quant:
            quantize_transformer(transformer, quant, dtype,
                                 filter_fn=lambda m, fqn: isinstance(m, torch.nn.Linear) and not keep_fp32(fqn, keep))
        pipe = WanPipeline(tokenizer=None, text_encoder=None, vae=None, transformer=transformer,
                           scheduler=UniPCMultistepScheduler(**UNIPC))
        g = torch.Generator("cpu").manual_seed(1)
        kwargs.update(prompt_embeds=torch.randn(1, TEXT_TOKENS, COMMON["text_dim"], generator=g).to(dtype),
                      negative_prompt_embeds=torch.randn(1, TEXT_TOKENS, COMMON["text_dim"], generator=g).to(dtype),
                      output_type="latent")
    else:
        pipe = WanPipeline.from_pretrained(a.model, torch_dtype=dtype)
        if quant:
            quantize_transformer(pipe.transformer, quant, dtype)
        kwargs.update(prompt=a.prompt, output_type="np")
    load_s, latencies, steps, extra = prepare_and_time(
        pipe, a, offload, compile_mode, apply_offload, t0,
        lambda n, cb: pipe(**kwargs, height=height, width=width, num_frames=a.frames, num_inference_steps=n, guidance_scale=GUIDANCE,
                           generator=torch.Generator("cpu").manual_seed(0), callback_on_step_end=cb).frames,
        last_block_attn=lambda t: t.blocks[-1].attn1.to_q,
        planes=lambda out: wan_planes(out, a.model.startswith("builtin:")))
    return {"latencies": latencies, "steps": steps, "load_s": load_s, "frames": a.frames,
            "guidance_scale": GUIDANCE, "transformer_passes_per_step": 2, "extra": extra}


def wan_planes(out, latents: bool):
    """WanPipeline's output as planes [..., H, W]: latents [B, C, F, h, w] as they are; frames (output_type
    "np", [N, F, H, W, 3]) -> [N, F, 3, H, W]."""
    import numpy as np
    import torch

    if latents:
        return out.float().numpy()
    out = out.float().numpy() if isinstance(out, torch.Tensor) else np.asarray(out, dtype=np.float32)
    return out.transpose(0, 1, 4, 2, 3)
