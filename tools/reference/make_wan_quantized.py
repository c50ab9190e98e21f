"""tests/fixtures/wan-quantized/: a tiny WanPipeline run by Diffusers with quantization, on the CPU: what diffq's
`--quant <scheme>`, its loading of Diffusers' pre-quantized Wan folders and of city96-style GGUF transformers must
come close to.

Folders (text_encoder, tokenizer, vae and scheduler are symlinks to tests/fixtures/tiny-wan, unquantized):
- `pipeline/`: tiny-wan with a transformer whose Linear in-features are multiples of 64 (2 heads x 32; bitsandbytes'
  CPU dequantize_4bit disagrees with its own quantize_4bit when in_features is not a multiple of the 64-element
  block, e.g. 32 or 96 — 8 is fine — so narrower layers would make the reference wrong) and 256 where the
  K-quants need whole super-blocks (ffn_dim 256; freq_dim 64, text_dim 8, 1 layer to keep the fixture small;
  random weights, norm
  parameters given N(0, 0.1) noise; stored bfloat16, loaded float32 — an exact upcast on both sides).
- `prequant-nf4/`, `prequant-fp8wo/`: the pipeline loaded by Diffusers with the transformer
  quantized (bitsandbytes nf4 / torchao Float8WeightOnlyConfig) and saved
  with save_pretrained: model_index.json and transformer/ are what Diffusers wrote (torchao's safetensors metadata
  sorted, `_name_or_path` dropped, for a deterministic fixture); the unquantized components it rewrote in float32
  are replaced by symlinks to tiny-wan (the same values).
- `gguf/wan-tiny-q4_k.gguf`: the pipeline's transformer as city96's Wan GGUF files are laid out (original Wan
  naming, general.architecture "wan", 1-D / 3-D / 5-D tensors F32), 2-D weights in Q4_K where the rows are whole
  256-element super-blocks (ffn.2), Q8_0 where they are whole 32-element blocks (every other Linear), F16
  otherwise (ggml's reference quantizers): one file holding both block types, as city96's K-quant files do.

`latents.safetensors` (final latents [1, 16, 2, 4, 4] of the call in cases.json, caught with callback_on_step_end):
- `none`: unquantized; `nf4`: PipelineQuantizationConfig bitsandbytes_4bit nf4 (compute float32) on transformer and
  text_encoder; `int8dq`, `fp8wo`: torchao on the transformer; `prequant_<scheme>`: Diffusers running the saved
  pre-quantized folder; `gguf_<type>`: from_single_file(GGUF, GGUFQuantizationConfig(compute_dtype=float32)) as the
  pipeline's transformer, and `gguf_<type>_f32`: the same with gguf-py's float32 dequantization in place of
  Diffusers' float16 dequantize functions (what diffq computes; also applied to the time_embedder weights Diffusers
  dequantizes at load).
`int8dq_nocfg`, `none_nocfg`: the same call with guidance_scale 1 (no CFG). int8dq's dynamic activation codes flip
under 1-ulp changes, and CFG 5 amplifies a flip: with CFG the latents move by up to ~1e-2 in Diffusers against
itself when one noise element is nudged by 1 ulp (cases.json schemes.int8dq.self_sensitivity: the worst of a few
nudged elements, for the call and for 1 step).
`frames.safetensors`: `nf4`: the same call's frames (output_type "np", [1, 5, 32, 32, 3]).

Run: tools/reference/regenerate_fixtures.sh wan_quantized  (needs tests/fixtures/tiny-wan first).
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import traceback

import numpy as np

from _common import FIXTURES, deterministic, dir_size, fresh_dir, save_tensors, write_json

TINY = FIXTURES / "tiny-wan"
TR_CFG = dict(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=32, in_channels=16, out_channels=16,
              text_dim=8, freq_dim=64, ffn_dim=256, num_layers=1, cross_attn_norm=True,
              qk_norm="rms_norm_across_heads", eps=1e-6, rope_max_seq_len=32)
CALL = dict(prompt="A photo of a Cat sitting on a RED chair, 4k!!", height=32, width=32, num_frames=5,
            num_inference_steps=2, guidance_scale=5.0, seed=0, max_sequence_length=16)
SHARED = ("scheduler", "text_encoder", "tokenizer", "vae")
NF4 = dict(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype="float32")
GGUF_TYPES = {"q4_k": "Q4_K"}


def patch_bnb_for_cpu() -> None:
    """Diffusers' bitsandbytes quantizers refuse to run without a GPU, although bitsandbytes 0.50 quantizes and runs
    Linear4bit on the CPU: the check is lifted and the default device map becomes the CPU (transformers' quantizer
    already falls back to the CPU)."""
    from diffusers.quantizers.bitsandbytes import bnb_quantizer

    for cls in (bnb_quantizer.BnB4BitDiffusersQuantizer, bnb_quantizer.BnB8BitDiffusersQuantizer):
        cls.validate_environment = lambda self, *a, **k: None
        cls.update_device_map = lambda self, device_map: device_map or {"": "cpu"}


def link_shared(folder) -> None:
    """Replace the unquantized components with symlinks to tiny-wan."""
    for c in SHARED:
        p = folder / c
        if p.is_symlink() or p.is_file():
            p.unlink()
        elif p.exists():
            shutil.rmtree(p)
        os.symlink(os.path.relpath(TINY / c, folder), p)


def make_pipeline_folder(root):
    import torch
    from diffusers import WanTransformer3DModel
    from make_tiny_wan import perturb_constants

    folder = root / "pipeline"
    folder.mkdir()
    shutil.copyfile(TINY / "model_index.json", folder / "model_index.json")
    link_shared(folder)
    torch.manual_seed(0)
    m = WanTransformer3DModel(**TR_CFG).eval()
    perturb_constants(m, torch.Generator().manual_seed(1))
    m.to(torch.bfloat16).save_pretrained(folder / "transformer", safe_serialization=True)
    cfg = json.loads((folder / "transformer" / "config.json").read_text())
    cfg.pop("_name_or_path", None)
    write_json(folder / "transformer" / "config.json", cfg)
    return folder


def plain_bnb_cpu_path(pipe) -> None:
    """bitsandbytes repacks 4-bit weights for an AVX512-BF16 CPU kernel that needs out_features % 32 == 0 (tiny-wan's
    UMT5 has 8): every Linear4bit takes the portable path instead (dequantize_4bit, then a float32 linear)."""
    for c in ("transformer", "text_encoder"):
        for mod in getattr(pipe, c).modules():
            if type(mod).__name__ == "Linear4bit":
                mod.support_avx512bf16_for_cpu = False


def self_sensitivity(pipe) -> dict:
    """How far the library moves against itself when one element of the initial noise is nudged by 1 ulp (int8dq's
    dynamic activation codes flip): the max relative change of the final latents over a few elements, for the call
    and for the same call with 1 step."""
    import torch
    from diffusers.utils.torch_utils import randn_tensor

    out = {}
    for steps in (CALL["num_inference_steps"], 1):
        noise = randn_tensor((1, 16, 2, 4, 4), generator=torch.Generator("cpu").manual_seed(CALL["seed"]),
                             dtype=torch.float32)
        base, _ = run(pipe, steps=steps, latents=noise.clone())
        worst = 0.0
        for idx in (0, 17, 100, 300, 511):
            n = noise.clone().flatten()
            n[idx] = torch.nextafter(n[idx], torch.tensor(10.0))
            got, _ = run(pipe, steps=steps, latents=n.view_as(noise))
            worst = max(worst, float((got - base).abs().max() / base.abs().max()))
        out[f"steps_{steps}"] = worst
    return out


def run(pipe, output_type="latent", steps=None, latents=None, guidance_scale=None):
    import torch

    plain_bnb_cpu_path(pipe)
    final = {}

    def catch(p, i, t, cb):
        final["latents"] = cb["latents"].clone()
        return {}

    kwargs = {k: v for k, v in CALL.items() if k != "seed"}
    if steps is not None:
        kwargs["num_inference_steps"] = steps
    if latents is not None:
        kwargs["latents"] = latents
    if guidance_scale is not None:
        kwargs["guidance_scale"] = guidance_scale
    pipe.set_progress_bar_config(disable=True)
    out = pipe(**kwargs, generator=torch.Generator("cpu").manual_seed(CALL["seed"]), output_type=output_type,
               callback_on_step_end=catch, callback_on_step_end_tensor_inputs=["latents"])
    frames = None if output_type == "latent" else torch.from_numpy(np.asarray(out.frames, dtype=np.float32))
    return final["latents"], frames


def torchao_config(name):
    import torchao.quantization as tq
    from diffusers import TorchAoConfig

    return TorchAoConfig(getattr(tq, name)())


def save_prequantized(pipe, root, name):
    """save_pretrained of the quantized pipeline, unquantized components relinked to tiny-wan."""
    from make_quant_torchao import sort_metadata_in_place

    folder = root / f"prequant-{name}"
    pipe.save_pretrained(folder, safe_serialization=True)
    link_shared(folder)
    tdir = folder / "transformer"
    for f in tdir.glob("*.safetensors"):
        sort_metadata_in_place(f)
    cfg = json.loads((tdir / "config.json").read_text())
    cfg.pop("_name_or_path", None)
    write_json(tdir / "config.json", cfg)
    return folder


def choose_gguf_type(shape, qtype, block):
    if len(shape) != 2:
        return "F32"  # 1-D norms and biases, 3-D modulations, the 5-D patch embedding
    if shape[1] % block == 0:
        return qtype
    return "Q8_0" if shape[1] % 32 == 0 else "F16"  # city96's K-quant files fall back to Q8_0 / F16 likewise


def write_city96_gguf(path, original: dict, qtype: str) -> dict:
    import gguf
    from gguf import GGMLQuantizationType as T
    from gguf.constants import GGML_QUANT_SIZES
    from make_quant_gguf import ggml_quantize

    block = GGML_QUANT_SIZES[T[qtype]][0]
    w = gguf.GGUFWriter(str(path), arch="wan")
    w.add_name("tiny Wan2.1 T2V (diffq quantization test)")
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    types = {}
    for name, t in original.items():
        v = t.float().numpy()
        tname = choose_gguf_type(v.shape, qtype, block)
        if tname == "F32":
            w.add_tensor(name, v.astype(np.float32))
        elif tname == "F16":
            w.add_tensor(name, v.astype(np.float16))
        else:
            w.add_tensor(name, ggml_quantize(v, T[tname]), raw_dtype=T[tname])
        types[name] = tname
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return types


def main() -> None:
    deterministic(0)
    import torch
    from diffusers import GGUFQuantizationConfig, WanPipeline, WanTransformer3DModel
    from diffusers.quantizers import PipelineQuantizationConfig
    from diffusers.quantizers.gguf import gguf_quantizer
    from diffusers.quantizers.gguf import utils as gguf_utils
    from make_wan_single_file import f32_dequant, to_original

    patch_bnb_for_cpu()
    root = fresh_dir(FIXTURES / "wan-quantized")
    folder = make_pipeline_folder(root)
    f32 = torch.float32
    latents, frames = {}, {}
    cases = {"call": CALL, "transformer_config": TR_CFG, "schemes": {}, "errors": {}}

    latents["none"], _ = run(WanPipeline.from_pretrained(folder, dtype=f32))

    # Quantize at load: bnb nf4 on transformer + text encoder; torchao on the transformer.
    q_nf4 = PipelineQuantizationConfig(quant_backend="bitsandbytes_4bit", quant_kwargs=NF4,
                                       components_to_quantize=["transformer", "text_encoder"])
    pipe = WanPipeline.from_pretrained(folder, dtype=f32, quantization_config=q_nf4)
    latents["nf4"], frames["nf4"] = run(pipe, "np")
    cases["schemes"]["nf4"] = {
        "quant_backend": "bitsandbytes_4bit", "quant_kwargs": NF4, "components": ["transformer", "text_encoder"],
        "linear4bit": {c: sorted(n for n, mod in getattr(pipe, c).named_modules() if type(mod).__name__ == "Linear4bit")
                       for c in ("transformer", "text_encoder")}}
    for name, cls in (("int8dq", "Int8DynamicActivationInt8WeightConfig"), ("fp8wo", "Float8WeightOnlyConfig")):
        q = PipelineQuantizationConfig(quant_mapping={"transformer": torchao_config(cls)})
        pipe = WanPipeline.from_pretrained(folder, dtype=f32, quantization_config=q)
        latents[name], _ = run(pipe)
        cases["schemes"][name] = {"quant_backend": "torchao", "quant_type": cls, "components": ["transformer"]}
        if name == "int8dq":
            latents["int8dq_nocfg"], _ = run(pipe, guidance_scale=1.0)
            cases["schemes"][name]["self_sensitivity"] = self_sensitivity(pipe)
    latents["none_nocfg"], _ = run(WanPipeline.from_pretrained(folder, dtype=f32), guidance_scale=1.0)

    # Pre-quantized folders written by save_pretrained (transformer quantized), then run by Diffusers.
    for name, q in (("nf4", PipelineQuantizationConfig(quant_backend="bitsandbytes_4bit", quant_kwargs=NF4,
                                                       components_to_quantize=["transformer"])),
                    ("fp8wo", PipelineQuantizationConfig(
                        quant_mapping={"transformer": torchao_config("Float8WeightOnlyConfig")}))):
        try:
            pipe = WanPipeline.from_pretrained(folder, dtype=f32, quantization_config=q)
            saved = save_prequantized(pipe, root, name)
            latents[f"prequant_{name}"], _ = run(WanPipeline.from_pretrained(saved, dtype=f32))
            cases["schemes"][f"prequant_{name}"] = {
                "folder": saved.name,
                "quantization_config": json.loads((saved / "transformer" / "config.json").read_text())
                .get("quantization_config")}
        except Exception as e:  # noqa: BLE001 - recorded: what the library cannot do here
            cases["errors"][f"prequant_{name}"] = f"{type(e).__name__}: {e}"[:300]
            traceback.print_exc()

    # city96-style GGUF transformers through from_single_file.
    (root / "gguf").mkdir()
    sd = {k: v.to(f32) for k, v in WanTransformer3DModel.from_pretrained(folder / "transformer",
                                                                        dtype=f32).state_dict().items()}
    original = to_original(sd)
    own = gguf_utils.dequantize_gguf_tensor
    for name, qtype in GGUF_TYPES.items():
        path = root / "gguf" / f"wan-tiny-{name}.gguf"
        types = write_city96_gguf(path, original, qtype)
        for suffix, patched in (("", False), ("_f32", True)):
            if patched:
                gguf_utils.dequantize_gguf_tensor = gguf_quantizer.dequantize_gguf_tensor = f32_dequant
            try:
                tr = WanTransformer3DModel.from_single_file(
                    str(path), config=str(folder / "transformer"), dtype=f32,
                    quantization_config=GGUFQuantizationConfig(compute_dtype=f32)).eval()
                pipe = WanPipeline.from_pretrained(folder, transformer=tr, dtype=f32)
                latents[f"gguf_{name}{suffix}"], _ = run(pipe)
            finally:
                gguf_utils.dequantize_gguf_tensor = gguf_quantizer.dequantize_gguf_tensor = own
        counts: dict = {}
        for t in types.values():
            counts[t] = counts.get(t, 0) + 1
        cases["schemes"][f"gguf_{name}"] = {
            "file": f"gguf/{path.name}", "type_counts": counts,
            "quantized": {k: t for k, t in sorted(types.items()) if t.startswith("Q")},
            "diffusers_gguf_parameters": sorted(k for k, v in tr.named_parameters()
                                                if getattr(v, "quant_type", None) is not None)}

    none = latents["none"]
    cases["rel_vs_none"] = {k: float((v - none).abs().max() / none.abs().max()) for k, v in latents.items()}
    for name in GGUF_TYPES:
        a, b = latents[f"gguf_{name}"], latents[f"gguf_{name}_f32"]
        cases["schemes"][f"gguf_{name}"]["diffusers_fp16_vs_f32_dequant_max_rel"] = float(
            (a - b).abs().max() / b.abs().max())
    save_tensors(root / "latents.safetensors", latents)
    save_tensors(root / "frames.safetensors", frames)
    write_json(root / "cases.json", cases)
    print(json.dumps(cases["rel_vs_none"], indent=1), json.dumps(cases["errors"], indent=1))
    print(f"wan-quantized: {dir_size(root)} bytes")


if __name__ == "__main__":
    main()
