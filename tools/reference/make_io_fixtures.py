"""Writes tests/fixtures/io/: safetensors / sharded Diffusers folder / GGUF files written by the
reference Python libraries, plus expected.json with what the C++ readers must find in them.

Run: tools/.venv/bin/python tools/reference/make_io_fixtures.py   (deterministic: fixed seeds)

Files:
  all_dtypes.safetensors  one tensor of every dtype diffq holds (special values included), metadata
                          {"format": "pt"} (one key, so the header bytes are deterministic: the Rust
                          library writes metadata keys in random HashMap order)
  metadata.safetensors    several metadata keys with escapes/unicode (compared as parsed maps)
  pipeline/               a tiny FluxPipeline saved with save_pretrained: sharded VAE (+ fp16 variant),
                          sharded CLIP text encoder (+ fp16 variant), single-file transformer,
                          scheduler, CLIP tokenizer, text_encoder_2/tokenizer_2 = [null, null]
  tiny.gguf               GGUFWriter output: F32/F16/BF16/Q8_0/Q4_0 tensors, every metadata type,
                          alignment 64
  expected.json           names, shapes, dtypes, byte checksums (FNV-1a 64), values
"""
from __future__ import annotations

import json
import math
import os
import random
import shutil
import struct
from pathlib import Path

os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "fixtures" / "io"


def fnv1a64(data: bytes) -> str:
    h = 0xCBF29CE484222325
    for b in data:
        h ^= b
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def jsonable(x: float):
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x


def tensor_bytes(t: torch.Tensor) -> bytes:
    t = t.contiguous()
    return t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""


def describe(t: torch.Tensor, values: bool) -> dict:
    from safetensors.torch import _TYPES  # dtype name table of the library itself

    names = {v: k for k, v in _TYPES.items()}
    d = {"dtype": names[t.dtype], "shape": list(t.shape), "fnv1a64": fnv1a64(tensor_bytes(t)),
         "nbytes": t.numel() * t.element_size()}
    if values:
        d["hex"] = tensor_bytes(t).hex()
        d["values"] = [jsonable(float(v)) for v in t.flatten().to(torch.float64).tolist()]
    return d


# ---- safetensors ---------------------------------------------------------------------------------------
def all_dtypes() -> dict:
    from safetensors.torch import save_file

    g = torch.Generator().manual_seed(0)
    special = torch.tensor([0.0, -0.0, 1.0, -2.5, float("inf"), -float("inf"), float("nan"), 1e-40,
                            3.0e38, 65504.0, 448.0, 1.0 / 3.0])
    t = {
        "f32": special.clone().reshape(3, 4),
        "f16": special.to(torch.float16),
        "bf16": special.to(torch.bfloat16).reshape(2, 6),
        "f8_e4m3": torch.tensor([0.0, -0.0, 1.0, -2.5, 448.0, -448.0, 0.001953125, float("nan")]
                                ).to(torch.float8_e4m3fn),
        "f8_e5m2": torch.tensor([0.0, 1.0, -2.5, 57344.0, float("inf"), -float("inf"),
                                 1.52587890625e-05, float("nan")]).to(torch.float8_e5m2),
        "i8": torch.tensor([-128, -1, 0, 1, 127], dtype=torch.int8),
        "u8": torch.tensor([0, 1, 128, 255], dtype=torch.uint8),
        "i32": torch.tensor([[-2147483648, -1], [0, 2147483647]], dtype=torch.int32),
        "i64": torch.tensor([-(2**62), -1, 0, 2**53, 2**62], dtype=torch.int64),
        "bool": torch.tensor([True, False, True], dtype=torch.bool),
        "scalar": torch.tensor(3.5),
        "empty": torch.zeros(0, 3),
        "randn": torch.randn(4, 5, 6, generator=g),
    }
    path = OUT / "all_dtypes.safetensors"
    save_file(t, str(path), metadata={"format": "pt"})
    raw = path.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    return {"file": path.name, "metadata": {"format": "pt"}, "header_bytes": n,
            "tensors": {k: describe(v, values=(k != "randn")) | ({"first": [float(x) for x in v.flatten()[:4]]} if k == "randn" else {})
                        for k, v in t.items()},
            "file_order": [k for k in json.loads(raw[8:8 + n]) if k != "__metadata__"]}


def metadata_file() -> dict:
    from safetensors.torch import save_file

    md = {"format": "pt", "unicode": "héllo ✓ 世界", "escapes": "quote\" back\\ nl\n tab\t ctl\x01 /",
          "empty": "", "json": json.dumps({"a": [1, 2]})}
    path = OUT / "metadata.safetensors"
    # The Rust library writes metadata keys in random (HashMap) order. Save until that order happens
    # to be sorted, which is the order diffq writes: the file stays Python-written, the fixture
    # deterministic, and the C++ writer can be checked byte for byte on a multi-key header too.
    for attempt in range(20000):
        save_file({"w": torch.arange(6, dtype=torch.float32).reshape(2, 3)}, str(path), metadata=md)
        raw = path.read_bytes()
        n = struct.unpack("<Q", raw[:8])[0]
        if list(json.loads(raw[8:8 + n])["__metadata__"]) == sorted(md):
            break
    else:
        raise RuntimeError("metadata keys never came out sorted")
    return {"file": path.name, "metadata": md}


# ---- Diffusers folder -------------------------------------------------------------------------------------
def clip_tokenizer(dir_: Path):
    from transformers import CLIPTokenizer

    dir_.mkdir(parents=True, exist_ok=True)
    vocab = {"<|startoftext|>": 0, "<|endoftext|>": 1}
    for i, tok in enumerate(["a</w>", "b</w>", "c</w>", "a", "b", "c", "ab</w>"]):
        vocab[tok] = i + 2
    (dir_ / "vocab.json").write_text(json.dumps(vocab))
    (dir_ / "merges.txt").write_text("#version: 0.2\na b</w>\n")
    return CLIPTokenizer(str(dir_ / "vocab.json"), str(dir_ / "merges.txt"), model_max_length=8)


def pipeline() -> dict:
    from diffusers import (AutoencoderKL, FlowMatchEulerDiscreteScheduler, FluxPipeline,
                           FluxTransformer2DModel)
    from transformers import CLIPTextConfig, CLIPTextModel

    torch.manual_seed(0)
    transformer = FluxTransformer2DModel(patch_size=1, in_channels=4, num_layers=1, num_single_layers=1,
                                         attention_head_dim=8, num_attention_heads=2,
                                         joint_attention_dim=16, pooled_projection_dim=16,
                                         guidance_embeds=True, axes_dims_rope=(2, 2, 4))
    vae = AutoencoderKL(in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * 2,
                        up_block_types=("UpDecoderBlock2D",) * 2, block_out_channels=(8, 16),
                        layers_per_block=1, latent_channels=1, norm_num_groups=4, sample_size=32)
    text_encoder = CLIPTextModel(CLIPTextConfig(vocab_size=9, hidden_size=16, intermediate_size=32,
                                                num_hidden_layers=2, num_attention_heads=2,
                                                max_position_embeddings=8, projection_dim=16,
                                                bos_token_id=0, eos_token_id=1, pad_token_id=1))
    scheduler = FlowMatchEulerDiscreteScheduler(shift=3.0, use_dynamic_shifting=True)
    tmp = OUT / "_tok"
    tokenizer = clip_tokenizer(tmp)
    pipe = FluxPipeline(scheduler=scheduler, vae=vae, text_encoder=text_encoder, tokenizer=tokenizer,
                        text_encoder_2=None, tokenizer_2=None, transformer=transformer)
    root = OUT / "pipeline"
    pipe.save_pretrained(str(root), max_shard_size="40KB")
    # transformers model sharded too (model-0000i-of-0000N + model.safetensors.index.json)
    text_encoder.save_pretrained(str(root / "text_encoder"), max_shard_size="10KB")
    (root / "text_encoder" / "model.safetensors").unlink(missing_ok=True)
    pipe.to(torch.float16)
    # the fp16 variant of the two sharded models (the transformer is saved as a single fp16 file)
    vae.save_pretrained(str(root / "vae"), max_shard_size="40KB", variant="fp16")
    text_encoder.save_pretrained(str(root / "text_encoder"), max_shard_size="10GB", variant="fp16")
    transformer.save_pretrained(str(root / "transformer"), max_shard_size="10GB", variant="fp16")
    shutil.rmtree(tmp)

    from safetensors import safe_open

    def component(name: str, variant: str) -> dict:
        d = root / name
        out = {}
        files = sorted(f for f in os.listdir(d) if f.endswith(".safetensors"))
        for f in files:
            is_variant = (".fp16" in f)
            if is_variant != (variant == "fp16"):
                continue
            with safe_open(str(d / f), "pt") as sf:
                for k in sf.keys():
                    out[k] = describe(sf.get_tensor(k), values=False)
        return out

    expected = {"pipeline_class": "FluxPipeline",
                "model_index": json.loads((root / "model_index.json").read_text()),
                "components": {}}
    for name in ["transformer", "vae", "text_encoder"]:
        expected["components"][name] = {v or "default": component(name, v) for v in ["", "fp16"]}
    expected["files"] = {name: sorted(os.listdir(root / name)) for name in os.listdir(root)
                         if (root / name).is_dir()}
    return expected


# ---- GGUF ----------------------------------------------------------------------------------------------------
def gguf_file() -> dict:
    import gguf
    from gguf import GGMLQuantizationType as Q

    rng = np.random.default_rng(0)
    path = OUT / "tiny.gguf"
    w = gguf.GGUFWriter(str(path), arch="diffq-test")
    w.add_custom_alignment(64)
    w.add_name("tiny io fixture")
    w.add_uint8("test.u8", 200)
    w.add_int8("test.i8", -100)
    w.add_uint16("test.u16", 60000)
    w.add_int16("test.i16", -30000)
    w.add_uint32("test.u32", 4000000000)
    w.add_int32("test.i32", -2000000000)
    w.add_float32("test.f32", 0.25)
    w.add_bool("test.bool", True)
    w.add_string("test.str", "héllo")
    w.add_uint64("test.u64", 2**63 + 5)
    w.add_int64("test.i64", -(2**40))
    w.add_float64("test.f64", -1.0 / 3.0)
    w.add_array("test.arr_i32", [1, -2, 3])
    w.add_array("test.arr_f32", [0.5, 1.5])
    w.add_array("test.arr_str", ["a", "bc", ""])
    w.add_array("test.arr_nested", [[1, 2], [3]])

    tensors = {
        "f32": rng.standard_normal((4, 8)).astype(np.float32),
        "f16": rng.standard_normal((3, 32)).astype(np.float16),
        "bf16_src": rng.standard_normal((2, 16)).astype(np.float32),
        "q8_0": rng.standard_normal((2, 64)).astype(np.float32),
        "q4_0": rng.standard_normal((3, 64)).astype(np.float32),
    }
    w.add_tensor("f32", tensors["f32"])
    w.add_tensor("f16", tensors["f16"])
    bf = gguf.quants.quantize(tensors["bf16_src"], Q.BF16)
    w.add_tensor("bf16", bf, raw_shape=bf.shape, raw_dtype=Q.BF16)
    for name, qt in [("q8_0", Q.Q8_0), ("q4_0", Q.Q4_0)]:
        q = gguf.quants.quantize(tensors[name], qt)
        w.add_tensor(name, q, raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    r = gguf.GGUFReader(str(path))
    out = {"file": path.name, "version": 3, "alignment": 64, "data_offset": int(r.data_offset),
           "tensors": [], "kv": {}}
    for t in r.tensors:
        raw = bytes(np.asarray(t.data).view(np.uint8).tobytes())
        out["tensors"].append({"name": t.name, "type": t.tensor_type.name,
                               "ne": [int(x) for x in t.shape],
                               "shape": [int(x) for x in reversed(t.shape)],
                               "offset": int(t.data_offset) - int(r.data_offset),
                               "nbytes": int(t.n_bytes), "fnv1a64": fnv1a64(raw)})
    for k, f in r.fields.items():
        if k.startswith("GGUF."):
            continue
        vt = f.types[0].name
        if vt == "ARRAY":
            val = f.contents()
        else:
            val = f.contents()
        out["kv"][k] = {"type": vt.lower(), "value": val}
    out["quant_sizes"] = {t.name: [t.value, bs, ts] for t, (bs, ts) in gguf.GGML_QUANT_SIZES.items()}
    return out


def main() -> None:
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    if OUT.exists():
        shutil.rmtree(OUT)
    OUT.mkdir(parents=True)
    from diffusers.utils import logging as dlog
    from transformers.utils import logging as tlog
    dlog.set_verbosity_error()
    tlog.set_verbosity_error()

    expected = {"generator": "tools/reference/make_io_fixtures.py",
                "all_dtypes": all_dtypes(), "metadata_file": metadata_file(),
                "pipeline": pipeline(), "gguf": gguf_file()}
    (OUT / "expected.json").write_text(json.dumps(expected, indent=1, ensure_ascii=False) + "\n")
    total = sum(p.stat().st_size for p in OUT.rglob("*") if p.is_file())
    print(f"wrote {OUT} ({total / 1024:.0f} KiB)")


if __name__ == "__main__":
    main()
