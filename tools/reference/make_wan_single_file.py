"""tests/fixtures/wan-single-file/: tiny Wan transformers as the single files users download, and what
Diffusers 0.42.1's WanTransformer3DModel.from_single_file computes from them.

- `wan2.1_t2v_tiny_comfy.safetensors`: tests/fixtures/wan-transformer/t2v (2 heads x 16, 2 layers, text 16,
  ffn 32, freq 32) in the original Wan naming under ComfyUI's "model.diffusion_model." prefix, float16, as
  Comfy-Org's wan2.1_t2v_1.3B_fp16.safetensors is laid out.
- `wan2.2_ti2v_tiny.safetensors`: tests/fixtures/wan-transformer/ti2v (48 channels) in the original naming,
  no prefix, bfloat16.
  Both are built by inverting the mapping and checked with Diffusers' OWN converter
  (single_file_utils.convert_wan_transformer_to_diffusers): converted back, every tensor must equal the
  Diffusers-named original bit for bit and no key may be left over. The comfy file is float16 (as
  Comfy-Org's), the ti2v one bfloat16; Diffusers loads them with torch_dtype=float32 (exact upcast).
- `gguf/wan-tiny-mixed.gguf` (+ `gguf/config.json`): the t2v config with freq_dim 256 and ffn_dim 256 (so
  that time_embedding.0 and ffn.2 have 256-wide rows for the K-quants), fresh random weights (norm
  weights/biases with N(0, 0.1) noise), written by gguf-py's GGUFWriter as city96's Wan GGUF files are:
  original naming, no prefix, general.architecture "wan", patch_embedding.weight a 5-D F32 tensor,
  modulations F32, 1-D tensors F32 (block 0's norms F16), 2-D weights in Q8_0/Q4_0/Q5_1/Q4_1/Q5_0/BF16/F16
  (gguf-py's quantizer) and Q4_K/Q5_K/Q6_K (ggml's quantize_row_*_ref through ggml-python), F16 where
  the rows are not whole blocks.

`reference.safetensors`:
- `comfy.out`: from_single_file(comfy file, config=wan-transformer/t2v) forward on the inputs of
  wan-transformer/reference.safetensors case `t2v_f3`;
- `ti2v.out`: the same for the ti2v file on case `ti2v` (per-token timesteps);
- `gguf.in.*`: inputs for the GGUF model (hidden [2,16,3,4,6], int64 timesteps, text [2,7,16]);
  `gguf.out_diffusers`: from_single_file(gguf, quantization_config=GGUFQuantizationConfig(compute_dtype=
  float32), torch_dtype=float32) forward (Diffusers' dequantize functions compute in float16);
  `gguf.out_f32_dequant`: the same with every dequantization done by gguf-py in float32 (what diffq
  computes): each GGUFLinear weight at forward and, at load, the quantized weights of Diffusers'
  _keep_in_fp32_modules (time_embedder), which Diffusers' GGUF quantizer turns into float32 tensors.
`expected.json`: per file, the parameter names and shapes of the model Diffusers loaded, the converter
check; for the GGUF file the tensor types and which parameters Diffusers keeps as GGUFParameters (with
their ggml type).

Run: tools/reference/regenerate_fixtures.sh wan_single_file  (needs tests/fixtures/wan-transformer first).
"""
from __future__ import annotations

import json

import numpy as np

from _common import FIXTURES, deterministic, dir_size, fresh_dir, save_tensors, write_json
from make_quant_gguf import ggml_quantize

PREFIX = "model.diffusion_model."
SRC = FIXTURES / "wan-transformer"
GGUF_FILE = "wan-tiny-mixed.gguf"
ROTATION = ["Q8_0", "Q4_0", "Q5_1", "Q4_1", "Q5_0", "BF16", "F16"]
KQUANTS = {"time_embedding.0.weight": "Q4_K", "blocks.0.ffn.2.weight": "Q5_K", "blocks.1.ffn.2.weight": "Q6_K"}


def to_original(sd: dict) -> dict:
    """Diffusers WanTransformer3DModel keys -> the original Wan names (the inverse of Diffusers' renames)."""
    top = {
        "condition_embedder.text_embedder.linear_1": "text_embedding.0",
        "condition_embedder.text_embedder.linear_2": "text_embedding.2",
        "condition_embedder.time_embedder.linear_1": "time_embedding.0",
        "condition_embedder.time_embedder.linear_2": "time_embedding.2",
        "condition_embedder.time_proj": "time_projection.1",
        "proj_out": "head.head",
        "patch_embedding": "patch_embedding",
    }
    block = {"attn1.to_q": "self_attn.q", "attn1.to_k": "self_attn.k", "attn1.to_v": "self_attn.v",
             "attn1.to_out.0": "self_attn.o", "attn1.norm_q": "self_attn.norm_q", "attn1.norm_k": "self_attn.norm_k",
             "attn2.to_q": "cross_attn.q", "attn2.to_k": "cross_attn.k", "attn2.to_v": "cross_attn.v",
             "attn2.to_out.0": "cross_attn.o", "attn2.norm_q": "cross_attn.norm_q", "attn2.norm_k": "cross_attn.norm_k",
             "norm2": "norm3", "ffn.net.0.proj": "ffn.0", "ffn.net.2": "ffn.2"}
    out = {}
    for k, v in sd.items():
        if k == "scale_shift_table":
            out["head.modulation"] = v
            continue
        mod, _, leaf = k.rpartition(".")
        if mod in top:
            out[f"{top[mod]}.{leaf}"] = v
            continue
        assert k.startswith("blocks."), k
        _, i, rest = k.split(".", 2)
        if rest == "scale_shift_table":
            out[f"blocks.{i}.modulation"] = v
            continue
        mod, _, leaf = rest.rpartition(".")
        out[f"blocks.{i}.{block[mod]}.{leaf}"] = v
    return {k: v.contiguous() for k, v in out.items()}


def check_converter(original: dict, diffusers_sd: dict) -> dict:
    """Diffusers' own converter must give back the Diffusers-named original exactly."""
    import torch
    from diffusers.loaders.single_file_utils import convert_wan_transformer_to_diffusers

    back = convert_wan_transformer_to_diffusers(dict(original))
    assert set(back) == set(diffusers_sd), (set(back) ^ set(diffusers_sd))
    for k, v in diffusers_sd.items():
        assert back[k].shape == v.shape and torch.equal(back[k], v), k
    return {"keys": len(back), "bit_exact": True}


def load_single_file(path, config_dir, **kw):
    import torch
    from diffusers import WanTransformer3DModel

    return WanTransformer3DModel.from_single_file(str(path), config=str(config_dir), torch_dtype=torch.float32,
                                                  **kw).eval()


def forward(model, hidden, timestep, text):
    import torch

    with torch.no_grad():
        return model(hidden, timestep, text, return_dict=False)[0]


def params_of(model) -> dict:
    """Parameter names and logical shapes (a GGUFParameter holds its packed bytes)."""
    from gguf.constants import GGML_QUANT_SIZES

    out = {}
    for k, v in model.named_parameters():
        qt = getattr(v, "quant_type", None)
        if qt is None:
            out[k] = list(v.shape)
        else:
            block, nbytes = GGML_QUANT_SIZES[qt]
            out[k] = [*v.shape[:-1], v.shape[-1] // nbytes * block]
    return out


def choose_type(name: str, shape: tuple, k: int) -> str:
    if name in KQUANTS:
        return KQUANTS[name]
    if len(shape) != 2:
        if name.startswith("blocks.0.") and "norm" in name and len(shape) == 1:
            return "F16"
        return "F32"  # 1-D, the 3-D modulations, the 5-D patch embedding
    if shape[1] % 32:
        return "F16"
    return ROTATION[k % len(ROTATION)]


def write_gguf(path, original: dict) -> dict:
    import gguf
    from gguf import GGMLQuantizationType as T

    w = gguf.GGUFWriter(str(path), arch="wan")
    w.add_name("tiny Wan2.1 T2V (diffq test)")
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    types, k = {}, 0
    for name, t in original.items():
        v = t.float().numpy()
        tname = choose_type(name, v.shape, k)
        if len(v.shape) == 2 and name not in KQUANTS and v.shape[1] % 32 == 0:
            k += 1
        if tname == "F32":
            w.add_tensor(name, v.astype(np.float32))
        elif tname == "F16":
            w.add_tensor(name, v.astype(np.float16))
        elif tname in ("Q4_K", "Q5_K", "Q6_K"):
            w.add_tensor(name, ggml_quantize(v, T[tname]), raw_dtype=T[tname])
        else:
            w.add_tensor(name, gguf.quants.quantize(v, T[tname]), raw_dtype=T[tname])
        types[name] = tname
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return types


def f32_dequant(tensor):
    """gguf-py's exact f32 dequantization, in place of Diffusers' fp16 dequantize functions."""
    import gguf
    import torch

    if not hasattr(tensor, "quant_type"):
        return tensor
    raw = tensor.as_tensor().view(torch.uint8).numpy()
    return torch.from_numpy(np.ascontiguousarray(gguf.quants.dequantize(raw, tensor.quant_type), dtype=np.float32))


def main() -> None:
    deterministic(0)
    import torch
    from diffusers import GGUFQuantizationConfig, WanTransformer3DModel
    from diffusers.quantizers.gguf import gguf_quantizer
    from diffusers.quantizers.gguf import utils as gguf_utils
    from safetensors.torch import load_file, save_file

    root = fresh_dir(FIXTURES / "wan-single-file")
    ref_in = load_file(str(SRC / "reference.safetensors"))
    tensors, expected = {}, {}

    # Original-named safetensors: t2v under the ComfyUI prefix, ti2v without.
    for tag, src, fname, prefix, case, dtype in (
            ("comfy", "t2v", "wan2.1_t2v_tiny_comfy.safetensors", PREFIX, "t2v_f3", torch.float16),
            ("ti2v", "ti2v", "wan2.2_ti2v_tiny.safetensors", "", "ti2v", torch.bfloat16)):
        sd = {k: v.to(dtype) for k, v in load_file(str(SRC / src / "diffusion_pytorch_model.safetensors")).items()}
        original = to_original(sd)
        conv = check_converter({prefix + k: v for k, v in original.items()}, sd)
        save_file({prefix + k: v for k, v in original.items()}, str(root / fname))
        m = load_single_file(root / fname, SRC / src)
        p = case + "."
        out = forward(m, ref_in[p + "in.hidden_states"], ref_in[p + "in.timestep"], ref_in[p + "in.encoder_hidden_states"])
        tensors[tag + ".out"] = out
        folder_out = ref_in[p + "out"]
        expected[fname] = {"converter": conv, "parameters": params_of(m), "reference_case": case,
                           "max_rel_vs_folder": float((out - folder_out).abs().max() / folder_out.abs().max())}

    # city96-style GGUF of a fresh model with 256-wide rows where the K-quants need them.
    cfg = json.loads((SRC / "t2v" / "config.json").read_text())
    cfg = {k: v for k, v in cfg.items() if not k.startswith("_")}
    cfg.update(freq_dim=256, ffn_dim=256)
    m = WanTransformer3DModel(**cfg).eval()
    with torch.no_grad():
        for pname, prm in m.named_parameters():
            if "norm" in pname:
                prm.add_(0.1 * torch.randn_like(prm))
    (root / "gguf").mkdir()
    m.save_config(root / "gguf")
    original = to_original({k: v.detach() for k, v in m.state_dict().items()})
    types = write_gguf(root / "gguf" / GGUF_FILE, original)

    g = torch.Generator().manual_seed(3)
    hidden = torch.randn(2, 16, 3, 4, 6, generator=g)
    timestep = torch.tensor([600, 20], dtype=torch.int64)
    text = torch.randn(2, 7, 16, generator=g)
    qm = load_single_file(root / "gguf" / GGUF_FILE, root / "gguf",
                          quantization_config=GGUFQuantizationConfig(compute_dtype=torch.float32))
    tensors.update({"gguf.in.hidden_states": hidden, "gguf.in.timestep": timestep, "gguf.in.encoder_hidden_states": text})
    tensors["gguf.out_diffusers"] = forward(qm, hidden, timestep, text)
    # Diffusers also dequantizes at load time: the quantized weights of _keep_in_fp32_modules (time_embedder)
    # become float32 tensors. So the f32-dequantized model is loaded again with the patch in place.
    own = gguf_utils.dequantize_gguf_tensor
    gguf_utils.dequantize_gguf_tensor = gguf_quantizer.dequantize_gguf_tensor = f32_dequant
    try:
        qm32 = load_single_file(root / "gguf" / GGUF_FILE, root / "gguf",
                                quantization_config=GGUFQuantizationConfig(compute_dtype=torch.float32))
        tensors["gguf.out_f32_dequant"] = forward(qm32, hidden, timestep, text)
    finally:
        gguf_utils.dequantize_gguf_tensor = gguf_quantizer.dequantize_gguf_tensor = own
    a, b = tensors["gguf.out_diffusers"], tensors["gguf.out_f32_dequant"]
    counts: dict = {}
    for t in types.values():
        counts[t] = counts.get(t, 0) + 1
    expected[GGUF_FILE] = {
        "types": types, "type_counts": counts, "parameters": params_of(qm),
        "diffusers_gguf_parameters": {k: v.quant_type.name for k, v in qm.named_parameters()
                                      if getattr(v, "quant_type", None) is not None},
        "diffusers_fp16_vs_f32_dequant_max_rel": float((a - b).abs().max() / b.abs().max()),
    }
    save_tensors(root / "reference.safetensors", tensors)
    import diffusers
    write_json(root / "expected.json", {"diffusers": diffusers.__version__, "files": expected})
    print(json.dumps({k: {kk: vv for kk, vv in v.items() if kk not in ("parameters", "types")}
                      for k, v in expected.items()}, indent=1))
    print(f"{root}: {dir_size(root)} bytes")


if __name__ == "__main__":
    main()
