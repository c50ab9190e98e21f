"""tests/fixtures/quant-bfl-modelopt/: pre-quantized FLUX transformers of the tiny pipeline
(tests/fixtures/tiny-flux), one BFL single file and one ModelOpt export, and what the libraries compute
from them on the CPU.

BFL (`flux-tiny-bfl.safetensors`): tiny-flux's transformer in BFL naming (make_flux_single_file.to_bfl),
each Linear weight quantized by Diffusers' own BFL helpers (diffusers.quantizers.bfl.utils: quantize_fp8r for
single_blocks.0, final_layer and the layers whose in_features is no multiple of 16, quantize_nvfp4 for every
other Linear; BFL's quantizer itself is not public), input_scale
of the nvfp4 layers the calibrated amax / (448 * 6) of their inputs on one tiny forward, unquantized tensors
bfloat16 as BFL's files are. Fp8r and nvfp4 layers share the file, which Diffusers reads per layer.
`bfl_reference.safetensors`: Diffusers' from_single_file(..., BFLQuantizationConfig(compute_dtype=float32))
on it: `deq.<diffusers key>` the library's dequantization (_dequantize_weight, through its own key
conversion: qkv split, final_layer halves swapped) of a few layers, and `latents` the pipeline's final
packed latents with that transformer (fp32 compute; the CPU path dequantizes, activations are not quantized).

ModelOpt (`modelopt-mixed/`: transformer/ written by ModelOpt, the other components symlinks to tiny-flux's): nvidia-modelopt 0.47 on the CPU, tiny-flux's transformer in bfloat16:
mtq.quantize per block / sub-block with a different preset each (MO_PARTS) (FP8_DEFAULT_CFG, FP8_PER_CHANNEL_PER_TOKEN_CFG, INT8_SMOOTHQUANT_CFG, INT4_AWQ_CFG
with block 16, NVFP4_DEFAULT_CFG on norm_out: once calibrated its activation fake-quant
needs CUDA, so it goes last), calibrated on tiny forwards, then export_hf_checkpoint(dtype=bfloat16):
quant_algo MIXED_PRECISION with quantized_layers naming each layer's algorithm. Diffusers cannot load
ModelOpt exports (its NVIDIAModelOptConfig wants quant_type, the restore-state format), so the reference
is a torch reference of the format's math on the CPU: `modelopt_reference.safetensors`: `deq.<key>` per
algorithm (fp8 * scale; int8 * scale[:, None]; int4 unpacked * group scale; nvfp4 via Diffusers'
dequantize_nvfp4, which is ModelOpt's layout) checked here against ModelOpt's own from_quantized_weight
(per-tensor FP8, INT8) and NVFP4QTensor dequantization, the int4 unpacking against ModelOpt's packer
(pack_int4_in_uint8 of the unpacked codes gives the file's bytes), and `latents` the pipeline run with every quantized Linear
computing F.linear(x * pre_quant_scale, W_deq) (weight-only; input_scale unused, as Diffusers' BFL CPU path).
"""
from __future__ import annotations

import copy
import json
from pathlib import Path

from _common import FIXTURES, deterministic, dir_size, fresh_dir, save_tensors, write_json

CALL = dict(prompt="A photo of a Cat sitting on a RED chair, 4k!!", height=32, width=32, num_inference_steps=2,
            guidance_scale=3.5, seed=0, max_sequence_length=64)
BFL_DEQ = ["transformer_blocks.0.attn.to_k", "norm_out.linear", "single_transformer_blocks.0.attn.to_v",
           "time_text_embed.timestep_embedder.linear_2"]


def run_pipeline(transformer):
    import torch
    from diffusers import FluxPipeline

    pipe = FluxPipeline.from_pretrained(FIXTURES / "tiny-flux", transformer=transformer, dtype=torch.float32)
    pipe.set_progress_bar_config(disable=True)
    final = {}

    def catch(p, i, t, cb):
        final["latents"] = cb["latents"].clone()
        return {}

    kw = {k: v for k, v in CALL.items() if k != "seed"}
    pipe(**kw, generator=torch.Generator("cpu").manual_seed(CALL["seed"]), output_type="latent",
         callback_on_step_end=catch, callback_on_step_end_tensor_inputs=["latents"])
    return final["latents"]


def tiny_forward(model, dtype=None):
    import torch

    dt = dtype or torch.float32
    g = torch.Generator().manual_seed(1)
    for _ in range(2):
        model(hidden_states=torch.randn(1, 16, 16, generator=g).to(dt),
              encoder_hidden_states=torch.randn(1, 8, 8, generator=g).to(dt),
              pooled_projections=torch.randn(1, 8, generator=g).to(dt), timestep=torch.tensor([0.5], dtype=dt),
              img_ids=torch.zeros(16, 3), txt_ids=torch.zeros(8, 3), guidance=torch.tensor([3.5], dtype=dt))


def make_bfl(out_dir):
    import torch
    from diffusers import BFLQuantizationConfig, FluxTransformer2DModel
    from diffusers.quantizers.bfl import utils as bfl
    from diffusers.loaders import single_file_model
    from make_flux_single_file import PREFIX, diffusers_converter, to_bfl

    base = FluxTransformer2DModel.from_pretrained(FIXTURES / "tiny-flux" / "transformer", dtype=torch.float32)
    # input amax per Diffusers Linear -> the nvfp4 layers' calibrated input_scale (BFL names below).
    amax = {}
    hooks = [m.register_forward_hook(lambda mod, i, o, n=n: amax.__setitem__(n, max(amax.get(n, 0.0), i[0].abs().max().item())))
             for n, m in base.named_modules() if isinstance(m, torch.nn.Linear)]
    with torch.no_grad():
        tiny_forward(base)
    for h in hooks:
        h.remove()
    cfg = base.config
    sd = to_bfl({k: v.detach() for k, v in base.state_dict().items()}, cfg.num_layers, cfg.num_single_layers)
    out = {}
    for k, v in sorted(sd.items()):
        if v.dim() == 2:
            p = k[: -len(".weight")]
            if v.shape[1] % bfl.NVFP4_BLOCK == 0 and not p.startswith((PREFIX + "single_blocks.0.", PREFIX + "final_layer.")):
                w, ws, ws2 = bfl.quantize_nvfp4(v)
                out[k], out[p + ".weight_scale"], out[p + ".weight_scale_2"] = w, ws, ws2.reshape(())
                out[p + ".input_scale"] = torch.tensor(0.5 / (448.0 * 6.0), dtype=torch.float32)
            else:
                out[k], out[p + ".weight_scale"] = bfl.quantize_fp8r(v)
        else:
            out[k] = v.to(torch.bfloat16)
    path = out_dir / "flux-tiny-bfl.safetensors"
    save_tensors(path, out)
    # Diffusers' converter hard-codes FLUX.1's inner_dim (3072): the same converter with the tiny one.
    single_file_model.SINGLE_FILE_LOADABLE_CLASSES["FluxTransformer2DModel"]["checkpoint_mapping_fn"] = (
        diffusers_converter(cfg.num_attention_heads * cfg.attention_head_dim))
    model = FluxTransformer2DModel.from_single_file(str(path), config=str(FIXTURES / "tiny-flux"), subfolder="transformer",
                                                    quantization_config=BFLQuantizationConfig(compute_dtype=torch.float32),
                                                    local_files_only=True)
    ref = {}
    kinds = {}
    for n in BFL_DEQ:
        m = model.get_submodule(n)
        if isinstance(m, bfl.BFLNVFP4Linear):
            ref["deq." + n] = bfl.dequantize_nvfp4(m.weight, m.weight_scale, m.weight_scale_2)
        else:
            ref["deq." + n] = bfl.dequantize_fp8r(m.weight, m.weight_scale)
        kinds[n] = type(m).__name__
    ref["latents"] = run_pipeline(model)
    save_tensors(out_dir / "bfl_reference.safetensors", ref)
    return {"file": path.name, "layers": kinds}


MO_PARTS = [  # (module path, ModelOpt preset); 4-bit where it can be, to keep the fixture small
    ("transformer_blocks.0.attn", "FP8_DEFAULT_CFG"),
    ("transformer_blocks.1.attn", "FP8_PER_CHANNEL_PER_TOKEN_CFG"),
    ("single_transformer_blocks.0", "INT8_SMOOTHQUANT_CFG"),
    ("single_transformer_blocks.1", "INT4_AWQ_CFG"),
    *[(f"transformer_blocks.{i}.{m}", "INT4_AWQ_CFG") for i in (0, 1) for m in ("ff", "ff_context", "norm1", "norm1_context")],
    *[(m, "INT4_AWQ_CFG") for m in ("time_text_embed.timestep_embedder", "time_text_embed.guidance_embedder", "x_embedder")],
    ("norm_out", "NVFP4_DEFAULT_CFG"),  # last: NVFP4's activation fake-quant needs CUDA once calibrated
]


def set_int4_block(cfg, block):
    for e in cfg["quant_cfg"]:
        c = e.get("cfg") if isinstance(e, dict) else None
        if isinstance(c, dict) and "block_sizes" in c and -1 in c["block_sizes"]:
            c["block_sizes"][-1] = block
        elif isinstance(c, list):
            for x in c:
                if "block_sizes" in x and -1 in x["block_sizes"]:
                    x["block_sizes"][-1] = block
    return cfg


def unpack_int4(packed, n):
    import torch

    lo = (packed & 0x0F).to(torch.int16)
    hi = (packed >> 4).to(torch.int16)
    codes = torch.stack([lo, hi], dim=1).reshape(n, -1)  # rows 2i (low), 2i+1 (high)
    return torch.where(codes >= 8, codes - 16, codes).float()


def mo_dequant(t, m, algo):
    import torch
    from diffusers.quantizers.bfl import utils as bfl

    w, s = t[m + ".weight"], t[m + ".weight_scale"].float()
    if algo in ("FP8", "FP8_PER_CHANNEL_PER_TOKEN"):
        return w.float() * (s[:, None] if s.dim() == 1 else s)
    if algo.startswith("W8A8") or algo.startswith("INT8"):
        return w.float() * s[:, None]
    if algo == "W4A16_AWQ":
        n = 2 * w.shape[0]
        return unpack_int4(w, n) * s.repeat_interleave(w.shape[1] // s.shape[1], dim=1)
    if algo == "NVFP4":
        return bfl.dequantize_nvfp4(w, t[m + ".weight_scale"], t[m + ".weight_scale_2"].float())
    raise ValueError(algo)


def make_modelopt(out_dir):
    import torch
    import torch.nn.functional as F
    import modelopt.torch.quantization as mtq
    from diffusers import FluxTransformer2DModel
    from modelopt.torch.export import export_hf_checkpoint
    from modelopt.torch.export.quant_utils import from_quantized_weight
    from safetensors.torch import load_file

    # bfloat16 (as real exports are): the tensors left unquantized are stored in it.
    model = FluxTransformer2DModel.from_pretrained(FIXTURES / "tiny-flux" / "transformer", dtype=torch.bfloat16)
    for path, preset in MO_PARTS:
        cfg = copy.deepcopy(getattr(mtq, preset))
        if preset == "INT4_AWQ_CFG":
            cfg = set_int4_block(cfg, 16)
        mtq.quantize(model.get_submodule(path), cfg, lambda _m: tiny_forward(model, torch.bfloat16))
    folder = out_dir / "modelopt-mixed" / "transformer"
    with torch.no_grad():
        export_hf_checkpoint(model, dtype=torch.bfloat16, export_dir=folder)
    # The rest of the pipeline folder: tiny-flux's components, by relative symlink (no copies).
    pipe_dir = folder.parent
    (pipe_dir / "model_index.json").write_text((FIXTURES / "tiny-flux" / "model_index.json").read_text())
    for c in ("scheduler", "text_encoder", "text_encoder_2", "tokenizer", "tokenizer_2", "vae"):
        (pipe_dir / c).symlink_to(Path("..") / ".." / "tiny-flux" / c, target_is_directory=True)
    qc = json.loads((folder / "config.json").read_text())["quantization_config"]
    layers = qc.get("quantized_layers", {})
    t = load_file(folder / "diffusion_pytorch_model.safetensors")

    # The torch reference: every quantized Linear = F.linear(x * pre_quant_scale, W_deq, bias) in float32.
    ref_model = FluxTransformer2DModel.from_pretrained(FIXTURES / "tiny-flux" / "transformer", dtype=torch.float32)
    sd = {k: v.float() for k, v in t.items() if not k.endswith(("_scale", "_scale_2")) and v.is_floating_point()
          and v.dtype != torch.float8_e4m3fn}
    ref, algos = {}, {}
    for m, lc in sorted(layers.items()):
        algo = lc["quant_algo"]
        deq = mo_dequant(t, m, algo)
        sd[m + ".weight"] = deq
        algos.setdefault(algo, m)
        if algo == "FP8" and t[m + ".weight_scale"].dim() == 0 or algo.startswith("W8A8"):
            lib = from_quantized_weight(t[m + ".weight"], t[m + ".weight_scale"].float(),
                                        "fp8" if algo == "FP8" else "int8_sq", torch.float32)
            assert torch.equal(lib, deq), m
        if algo == "NVFP4":  # ModelOpt's own NVFP4QTensor dequantization of the exported tensors
            from modelopt.torch.quantization.qtensor.nvfp4_tensor import NVFP4QTensor

            qt = NVFP4QTensor(deq.shape, torch.float32, t[m + ".weight"])
            lib = qt.dequantize(torch.float32, scale=t[m + ".weight_scale"], double_scale=t[m + ".weight_scale_2"].float(),
                                block_sizes={-1: 16})
            assert torch.equal(lib, deq), m
        if algo == "W4A16_AWQ":  # the unpacking is the inverse of ModelOpt's packer on these codes
            from modelopt.torch.export.quant_utils import pack_int4_in_uint8

            codes = unpack_int4(t[m + ".weight"], deq.shape[0])
            assert torch.equal(pack_int4_in_uint8(codes, torch.ones(codes.shape[0], codes.shape[1] // 16), 16),
                               t[m + ".weight"]), m
        if m + ".pre_quant_scale" in t:
            pqs = t[m + ".pre_quant_scale"].float()
            ref_model.get_submodule(m).register_forward_pre_hook(lambda mod, a, s=pqs: (a[0] * s,))
    missing, unexpected = ref_model.load_state_dict(sd, strict=False)
    assert not unexpected and not [k for k in missing if not k.endswith("weight")], (missing, unexpected)
    for algo, m in algos.items():
        ref["deq." + m] = sd[m + ".weight"]
    ref["latents"] = run_pipeline(ref_model)
    save_tensors(out_dir / "modelopt_reference.safetensors", ref)
    return {"folder": "modelopt-mixed", "quant_algo": qc.get("quant_algo"), "layers_per_algo": {
        a: sorted(m for m, c in layers.items() if c["quant_algo"] == a) for a in sorted({c["quant_algo"] for c in layers.values()})},
        "deq_layers": algos, "pre_quant_scale": sorted(k for k in t if k.endswith(".pre_quant_scale"))}


def main() -> None:
    deterministic(0)
    out_dir = fresh_dir(FIXTURES / "quant-bfl-modelopt")
    cases = {"call": CALL, "bfl": make_bfl(out_dir)}
    deterministic(0)
    cases["modelopt"] = make_modelopt(out_dir)
    write_json(out_dir / "cases.json", cases)
    print(f"quant-bfl-modelopt: {dir_size(out_dir)} bytes")


if __name__ == "__main__":
    main()
