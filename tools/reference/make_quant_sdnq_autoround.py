"""tests/fixtures/quant-sdnq-autoround/: SDNQ (quantize on load and a pre-quantized folder) and AutoRound (a
pre-quantized folder) on the tiny FLUX dev pipeline (tests/fixtures/tiny-flux, reused by path), run by
Diffusers 0.42 + sdnq 0.2.8 / auto-round 0.16 on the CPU.

`cases.json`:
  "call": the FluxPipeline call (prompt, size, steps, guidance, seed, max_sequence_length).
  "sdnq": per case the SDNQConfig kwargs given to Diffusers (quant_mapping {"transformer": SDNQConfig(**kw)})
    and, per Linear the library quantized ("modules"): "dequantized" = "<FNV-1a 64> <dtype> <shape>" of the
    library's dequantized weight (the SDNQDequantizer the forward calls, float32), "stored" = FNV-1a 64 of the
    ";"-joined such descriptions of its weight, scale (and zero_point) tensors; the Linear layers it left
    dense ("dense").
  "prequant_sdnq": the same for the pre-quantized folder `prequant-sdnq/` (save_pretrained of the
    quantize-on-load transformer; the other components are symlinks to tiny-flux).
  "autoround": the same for `prequant-autoround/` (AutoRound RTN, iters=0, written by auto-round's exporter
    with the auto_round packing) and the dequantization auto-round's QuantLinear forward computes.
`latents.safetensors`: the final packed latents of each case (callback_on_step_end), and "none" unquantized.

Run: cd tools/reference && CUDA_VISIBLE_DEVICES= HF_HUB_OFFLINE=1 ../.venv/bin/python make_quant_sdnq_autoround.py
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from _common import FIXTURES, deterministic, dir_size, fresh_dir, save_tensors, write_json

CALL = dict(prompt="A photo of a Cat sitting on a RED chair, 4k!!", height=32, width=32, num_inference_steps=2,
            guidance_scale=3.5, seed=0, max_sequence_length=64)

# minimum_allowed_numel 2048: the library's default (16384) would leave every Linear of the tiny model dense;
# 2048 keeps the 32x32 attention projections dense (the rule is exercised both ways).
SMALL = dict(minimum_allowed_numel=2048)
SDNQ_CASES = {
    "int8": dict(weights_dtype="int8", **SMALL),  # group_size 0 -> 1024 >= in_features: row-wise
    "uint4_g16": dict(weights_dtype="uint4", group_size=16, **SMALL),
    "int4": dict(weights_dtype="int4", **SMALL),  # auto group 64: 2 groups where in_features is 128
    "uint2": dict(weights_dtype="uint2", **SMALL),  # auto group 16
    "float8_e4m3fn": dict(weights_dtype="float8_e4m3fn", **SMALL),
    "int2_skip": dict(weights_dtype="int2", modules_to_not_convert=["ff_context"],
                      modules_dtype_dict={"int8": ["proj_mlp"]}, **SMALL),
    # saved as the pre-quantized folder: every Linear (no skip keys, no minimum size), 2-bit: a small file
    "uint2_g64_all": dict(weights_dtype="uint2", group_size=64, minimum_allowed_numel=0, add_skip_keys=False),
}
PREQUANT_SDNQ = "uint2_g64_all"


def fnv1a64(t) -> str:
    b = t.detach().contiguous().cpu().view(-1).view(__import__("torch").uint8).numpy().tobytes()
    h = 0xCBF29CE484222325
    for x in b:
        h ^= x
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def tensor_desc(t) -> str:
    """"<fnv1a64> <dtype> <d0>x<d1>...": one short line per tensor in cases.json."""
    return f"{fnv1a64(t)} {str(t.dtype).replace('torch.', '')} {'x'.join(str(d) for d in t.shape)}"


def fnv1a64_str(text: str) -> str:
    h = 0xCBF29CE484222325
    for x in text.encode():
        h ^= x
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def sdnq_layers(model) -> tuple[dict, list]:
    import torch
    from sdnq.utils import get_sdnq_params

    mods, dense = {}, []
    for name, m in sorted(model.named_modules()):
        if hasattr(m, "sdnq_dequantizer"):
            p = get_sdnq_params(m)
            d = m.sdnq_dequantizer
            with torch.no_grad():
                deq = d(**p)  # what the forward feeds F.linear
            # "stored": FNV-1a 64 of the ";"-joined descriptions of weight, scale (and zero_point)
            stored = ";".join(tensor_desc(p[k]) for k in ("weight", "scale", "zero_point") if p.get(k) is not None)
            e = {"weights_dtype": d.weights_dtype, "dequantized": tensor_desc(deq.to(torch.float32)),
                 "stored": fnv1a64_str(stored)}
            mods[name] = e
        elif isinstance(m, torch.nn.Linear):
            dense.append(name)
    return mods, dense


def main() -> None:
    deterministic(0)
    import torch
    from diffusers import FluxPipeline, SDNQConfig
    from diffusers.quantizers import PipelineQuantizationConfig

    out = fresh_dir(FIXTURES / "quant-sdnq-autoround")
    tiny = FIXTURES / "tiny-flux"
    kwargs = {k: v for k, v in CALL.items() if k != "seed"}
    tensors, cases = {}, {"call": CALL, "sdnq": {}}

    def run(pipe):
        final = {}

        def catch(p, i, t, cb):
            final["latents"] = cb["latents"].clone()
            return {}

        pipe.set_progress_bar_config(disable=True)
        pipe(**kwargs, generator=torch.Generator("cpu").manual_seed(CALL["seed"]), output_type="latent",
             callback_on_step_end=catch, callback_on_step_end_tensor_inputs=["latents"])
        return final["latents"]

    def link_pipeline(folder: Path) -> None:
        for c in ("scheduler", "text_encoder", "text_encoder_2", "tokenizer", "tokenizer_2", "vae"):
            os.symlink(f"../../tiny-flux/{c}", folder / c)
        shutil.copy(tiny / "model_index.json", folder / "model_index.json")

    tensors["none"] = run(FluxPipeline.from_pretrained(tiny, dtype=torch.float32))

    # ---- SDNQ: quantize on load (Diffusers' PipelineQuantizationConfig, quant_backend "sdnq") ----
    for name, kw in SDNQ_CASES.items():
        # quant_backend="sdnq" with quant_kwargs is refused by PipelineQuantizationConfig (it also checks
        # transformers' backend list, which has no sdnq): the mapping form with Diffusers' SDNQConfig.
        q = PipelineQuantizationConfig(quant_mapping={"transformer": SDNQConfig(**kw)})
        pipe = FluxPipeline.from_pretrained(tiny, dtype=torch.float32, quantization_config=q)
        tensors[f"sdnq_{name}"] = run(pipe)
        mods, dense = sdnq_layers(pipe.transformer)
        cases["sdnq"][name] = {"quant_kwargs": kw, "modules": mods, "dense": dense}
        if name == PREQUANT_SDNQ:  # the pre-quantized folder: save_pretrained of this transformer
            pq = out / "prequant-sdnq"
            pq.mkdir()
            link_pipeline(pq)
            pipe.transformer.save_pretrained(pq / "transformer")
    pipe = FluxPipeline.from_pretrained(out / "prequant-sdnq", dtype=torch.float32)
    tensors["prequant_sdnq"] = run(pipe)
    mods, dense = sdnq_layers(pipe.transformer)
    cases["prequant_sdnq"] = {"folder": "prequant-sdnq", "modules": mods, "dense": dense}

    # ---- AutoRound: RTN (iters=0) of the tiny pipeline by auto-round's model-free path, which writes the
    # transformer as "model.safetensors" (renamed to Diffusers' file name) with packing "auto_round"
    # (asymmetric int4, group 32). Diffusers loads it through auto-round's torch QuantLinear, whose
    # BackendInfo declares float16/bfloat16 compute only, so post_init casts the model, which Diffusers
    # refuses for a float32 model: "float32" is added to that list (the QuantLinear math is the same).
    from auto_round import AutoRound
    from auto_round.inference.backend import BackendInfos

    with tempfile.TemporaryDirectory() as tmp:
        # norm_out / proj_out are left dense: the model-free exporter would pack them although they are
        # outside block_name_to_quantize, where Diffusers' loader (convert_hf_model) keeps nn.Linear.
        ar = AutoRound(str(tiny), iters=0, disable_opt_rtn=True, scheme="W4A16", group_size=32, sym=False,
                       device_map="cpu", ignore_layers="norm_out,proj_out")
        ar.quantize_and_save(tmp, format="auto_round")
        pq = out / "prequant-autoround"
        pq.mkdir()
        link_pipeline(pq)
        (pq / "transformer").mkdir()
        shutil.copy(Path(tmp) / "transformer" / "config.json", pq / "transformer" / "config.json")
        shutil.copy(Path(tmp) / "transformer" / "model.safetensors",
                    pq / "transformer" / "diffusion_pytorch_model.safetensors")
    for b in ("auto_round:torch", "auto_round:torch_zp"):
        if "float32" not in BackendInfos[b].compute_dtype:
            BackendInfos[b].compute_dtype.append("float32")
    pipe = FluxPipeline.from_pretrained(pq, dtype=torch.float32)
    tensors["prequant_autoround"] = run(pipe)
    mods, dense = {}, []
    for name, m in sorted(pipe.transformer.named_modules()):
        if hasattr(m, "qweight"):
            bias, m.bias = m.bias, None
            with torch.no_grad():  # x = I: QuantLinear's forward returns its dequantized weights^T exactly
                deq = m(torch.eye(m.infeatures, dtype=torch.float32)).t().contiguous()
            m.bias = bias
            mods[name] = {"class": f"{type(m).__module__}.{type(m).__name__}", "bits": m.bits,
                          "group_size": m.group_size, "dequantized": tensor_desc(deq)}
        elif isinstance(m, torch.nn.Linear):
            dense.append(name)
    cases["autoround"] = {"folder": "prequant-autoround", "modules": mods, "dense": dense}

    save_tensors(out / "latents.safetensors", tensors)
    write_json(out / "cases.json", cases)
    print(f"quant-sdnq-autoround: {dir_size(out)} bytes")


if __name__ == "__main__":
    main()
