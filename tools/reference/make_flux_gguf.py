"""tests/fixtures/tiny-flux-gguf/: the tiny FLUX transformer (tests/fixtures/tiny-flux/transformer) as a
single-file GGUF in BFL / ComfyUI naming, written by gguf-py's GGUFWriter the way city96's
FLUX.1-dev-gguf files are (no "model.diffusion_model." prefix, general.architecture "flux"), with a mix
of ggml types so that one small file exercises every loading path:
  - fused qkv / linear1 and final_layer.adaLN_modulation.1 quantized (split / swapped on the bytes),
  - 2-D weights in Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 (gguf-py's quantizer), Q4_K and Q6_K (ggml's
    quantize_row_*_ref through ggml-python; only time_in / guidance_in have 256-wide rows), BF16,
  - small 2-D weights in F16 / F32, 1-D tensors in F32 and (norm scales of block 0) F16.

transformer_forward.safetensors holds, for the inputs of tiny-flux/reference/transformer_forward.safetensors:
  out_diffusers:  Diffusers' own GGUF path: FluxTransformer2DModel.from_single_file(file,
                  quantization_config=GGUFQuantizationConfig(compute_dtype=float32), torch_dtype=float32).
                  Its dequantize functions compute in float16 (GGUF scales are half), so its weights
                  differ from the exact (f32) dequantization by up to ~1 fp16 ulp.
  out_f32_dequant: the same Diffusers model with each GGUFLinear weight dequantized by gguf-py's
                  gguf.quants.dequantize in float32 (what diffq computes: bit-exact f32 dequantization).
Diffusers' converter hard-codes FLUX.1's inner_dim 3072 for the linear1 split, so (as in
make_flux_single_file.py) it is re-executed with the tiny model's inner dim substituted.

Run: tools/reference/regenerate_fixtures.sh flux_gguf  (needs tests/fixtures/tiny-flux first).
"""
from __future__ import annotations

import json

import numpy as np

from _common import FIXTURES, deterministic, dir_size, save_tensors
from make_flux_single_file import PREFIX, diffusers_converter, to_bfl
from make_quant_gguf import ggml_quantize

FILE = "flux1-tiny-dev-mixed.gguf"
ROTATION = ["Q8_0", "Q4_0", "Q5_1", "Q4_1", "Q5_0", "BF16"]  # 2-D tensors with 32-multiple rows, in turn


def choose_type(name: str, shape: tuple, k: int) -> str:
    if len(shape) == 1:
        return "F16" if name.startswith("double_blocks.0.") and "norm" in name else "F32"
    if name == "time_in.in_layer.weight":
        return "Q4_K"
    if name == "guidance_in.in_layer.weight":
        return "Q6_K"
    if shape[1] % 32 or shape[0] * shape[1] <= 1024:
        return "F16" if name.startswith(("img_in", "final_layer.linear")) else "F32"
    return ROTATION[k % len(ROTATION)]


def encode(v: np.ndarray, tname: str) -> np.ndarray:
    import gguf
    from gguf import GGMLQuantizationType as T

    if tname == "F32":
        return v.astype(np.float32)
    if tname == "F16":
        return v.astype(np.float16)
    if tname in ("Q4_K", "Q6_K"):
        return ggml_quantize(v, T[tname])
    return gguf.quants.quantize(v, T[tname])


def write_gguf(path, bfl: dict) -> dict:
    import gguf
    from gguf import GGMLQuantizationType as T

    w = gguf.GGUFWriter(str(path), arch="flux")
    w.add_name("tiny FLUX.1-dev (diffq test)")
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    types, k = {}, 0
    for key, t in bfl.items():
        name = key[len(PREFIX):]
        v = t.float().numpy()
        tname = choose_type(name, v.shape, k)
        if len(v.shape) == 2 and tname not in ("F32", "F16") and name not in ("time_in.in_layer.weight",
                                                                              "guidance_in.in_layer.weight"):
            k += 1
        data = encode(v, tname)
        if tname in ("F32", "F16"):
            w.add_tensor(name, data)
        else:
            w.add_tensor(name, data, raw_dtype=T[tname])
        types[name] = tname
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return types


def load_diffusers(path, cfg_dir, inner: int):
    import torch
    from diffusers import FluxTransformer2DModel, GGUFQuantizationConfig
    from diffusers.loaders import single_file_model

    fn = diffusers_converter(inner)
    single_file_model.SINGLE_FILE_LOADABLE_CLASSES["FluxTransformer2DModel"]["checkpoint_mapping_fn"] = fn
    return FluxTransformer2DModel.from_single_file(
        str(path), config=str(cfg_dir), subfolder="transformer",
        quantization_config=GGUFQuantizationConfig(compute_dtype=torch.float32), torch_dtype=torch.float32)


def forward(model, ref):
    import torch

    with torch.no_grad():
        return model(hidden_states=ref["in.hidden_states"], encoder_hidden_states=ref["in.encoder_hidden_states"],
                     pooled_projections=ref["in.pooled_projections"], timestep=ref["in.timestep"],
                     guidance=ref["in.guidance"], txt_ids=ref["in.txt_ids"], img_ids=ref["in.img_ids"]).sample


def f32_dequant(tensor):
    """gguf-py's exact f32 dequantization, in place of Diffusers' fp16 dequantize functions."""
    import gguf
    import torch

    if not hasattr(tensor, "quant_type"):
        return tensor
    raw = tensor.as_tensor().view(torch.uint8).numpy()
    return torch.from_numpy(np.ascontiguousarray(gguf.quants.dequantize(raw, tensor.quant_type), dtype=np.float32))


def forward_both(path, cfg_dir, inner: int, ref) -> dict:
    """Diffusers' own GGUF output and the f32-dequantized one, for the GGUF file at `path`."""
    from diffusers.quantizers.gguf import utils as gguf_utils

    model = load_diffusers(path, cfg_dir, inner)
    out = {"out_diffusers": forward(model, ref)}
    own = gguf_utils.dequantize_gguf_tensor
    gguf_utils.dequantize_gguf_tensor = f32_dequant
    try:
        out["out_f32_dequant"] = forward(model, ref)
    finally:
        gguf_utils.dequantize_gguf_tensor = own
    return out


def main() -> None:
    deterministic(0)
    from safetensors.torch import load_file

    src_dir = FIXTURES / "tiny-flux" / "transformer"
    cfg = json.loads((src_dir / "config.json").read_text())
    sd = load_file(str(src_dir / "diffusion_pytorch_model.safetensors"))
    bfl = to_bfl(sd, cfg["num_layers"], cfg["num_single_layers"])
    out_dir = FIXTURES / "tiny-flux-gguf"  # not cleared: check_flux_gguf.py's results live here too
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / FILE).unlink(missing_ok=True)
    types = write_gguf(out_dir / FILE, bfl)

    ref = load_file(str(FIXTURES / "tiny-flux" / "reference" / "transformer_forward.safetensors"))
    inner = cfg["num_attention_heads"] * cfg["attention_head_dim"]
    outs = forward_both(out_dir / FILE, FIXTURES / "tiny-flux", inner, ref)
    save_tensors(out_dir / "transformer_forward.safetensors", outs)
    a, b = outs["out_diffusers"], outs["out_f32_dequant"]
    diff = float((a - b).abs().max() / b.abs().max())
    counts: dict = {}
    for t in types.values():
        counts[t] = counts.get(t, 0) + 1
    print(f"tiny-flux-gguf: {len(types)} tensors {dict(sorted(counts.items()))}, {dir_size(out_dir)} bytes; "
          f"Diffusers fp16-dequant vs f32-dequant output: max rel {diff:.3g}")


if __name__ == "__main__":
    main()
