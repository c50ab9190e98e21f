"""tests/fixtures/torch-bin/: PyTorch `.bin` checkpoints (torch.save's zip format) for diffq's restricted
unpickler (src/io/torch_pickle.*, torch_checkpoint.*).

- `tensors.bin`: torch.save of a state dict with every dtype diffq holds (f32, f16, bf16, fp8 e4m3/e5m2
  via _rebuild_tensor_v3, i8, u8, i32, i64, bool), a 0-d tensor, an nn.Parameter, and views that keep
  their storage's layout: a transpose (non-contiguous strides), a slice with a storage offset, two
  views of one storage. `tensors_p4.bin`: the same with pickle protocol 4 (FRAME, SHORT_BINUNICODE,
  MEMOIZE, STACK_GLOBAL). `tensors.safetensors`: the same values, contiguous (what diffq must read).
- `sharded/`: a very small random FluxTransformer2DModel saved by Diffusers with save_pretrained(
  safe_serialization=False, max_shard_size="3KB"): diffusion_pytorch_model.bin.index.json + shards;
  `sharded_expected.safetensors` its state dict.
- Refusals: `malicious.bin` (torch.save of an object whose __reduce__ is os.system: the pickle names
  posix.system), `compressed.bin` (tensors.bin re-zipped with data.pkl deflated), `bad_offset.bin` (a
  tensor whose storage offset + size pass the end of its 4-element storage, pickled by hand), and
  `big_storage.bin` (a storage claiming more elements than its file entry holds).
- `flux-int8wo/transformer/`: the tiny FLUX transformer (tests/fixtures/tiny-flux) quantized by Diffusers
  with TorchAoConfig(Int8WeightOnlyConfig()) in float32 and saved with save_pretrained(safe_serialization=
  False) (seed 003). `flux_int8wo.safetensors`: `latents` = the final packed latents of the
  tests/fixtures/flux-quantized call with Diffusers loading that folder (AutoModel.from_pretrained(...,
  use_safetensors=False)) into the tiny pipeline, and `<module>.dequantized` = torchao's dequantize() of
  a few of its weights. `flux_int8wo.json`: the call, and torchao's own safetensors metadata
  (flatten_tensor_state_dict) for those weights.

- `flux-int8dq/transformer/`, `flux-fp8wo/transformer/`: a smaller random FluxTransformer2DModel that fits
  the tiny pipeline (1 + 1 layers, 1 head of 6) quantized by Diffusers with TorchAoConfig(
  Int8DynamicActivationInt8WeightConfig()) / TorchAoConfig(Float8WeightOnlyConfig()) in float32, saved with
  safe_serialization=False. `flux_<tag>.safetensors` / `flux_<tag>.json`: as for int8wo (Diffusers' final
  latents with that transformer in the tiny pipeline, torchao's dequantize() and flatten_tensor_state_dict
  metadata of a few weights).
- `flux_single_file_<naming>.json` + `.pkl`: torch.save of the tiny FLUX transformer's state dict in
  Diffusers naming (tests/fixtures/tiny-flux/transformer) and BFL naming (tiny-flux-single-file), without
  the tensor bytes: the recipe lists the zip's entries in order, each storage entry naming the
  safetensors tensor whose bytes it holds, and the sha256 of the file the recipe rebuilds (a stored zip,
  64-byte aligned data, written by `rebuild()` below) after torch.load of that rebuilt file gave the state
  dict back. The C++ test rebuilds it from the safetensors the same way (keeps the fixture < 30 KB).

Run: cd tools/reference && CUDA_VISIBLE_DEVICES= HF_HUB_OFFLINE=1 ../.venv/bin/python make_torch_bin.py
(needs tests/fixtures/tiny-flux and flux-quantized/cases.json).
"""
from __future__ import annotations

import io
import json
import os
import pickle
import zipfile
from collections import OrderedDict

from _common import FIXTURES, deterministic, dir_size, fresh_dir, save_tensors, write_json

DEQUANTIZED = ["transformer_blocks.0.attn.to_q", "single_transformer_blocks.1.attn.to_k", "proj_out"]


def plain_state_dict():
    import torch

    g = torch.Generator().manual_seed(0)
    base = torch.randn(4, 6, generator=g)
    sd = OrderedDict()
    sd["f32"] = torch.randn(3, 4, generator=g)
    sd["f16"] = torch.randn(2, 3, generator=g).half()
    sd["bf16"] = torch.randn(5, generator=g).bfloat16()
    sd["f8_e4m3"] = (torch.randn(2, 4, generator=g) * 8).to(torch.float8_e4m3fn)
    sd["f8_e5m2"] = (torch.randn(4, generator=g) * 8).to(torch.float8_e5m2)
    sd["i8"] = torch.randint(-128, 127, (6,), generator=g, dtype=torch.int8)
    sd["u8"] = torch.randint(0, 255, (2, 2), generator=g, dtype=torch.uint8)
    sd["i32"] = torch.randint(-2**31, 2**31 - 1, (3,), generator=g, dtype=torch.int32)
    sd["i64"] = torch.tensor([-(2**62), 7, 2**40], dtype=torch.int64)
    sd["bool"] = torch.tensor([True, False, True])
    sd["scalar"] = torch.tensor(3.25)
    sd["param"] = torch.nn.Parameter(torch.randn(2, 2, generator=g))
    sd["view.t"] = base.t()  # [6, 4], strides (1, 6)
    sd["view.slice"] = base[1:3, 2:]  # offset 8, strides (6, 1)
    sd["view.row"] = base[3]  # same storage as the two above
    sd["empty"] = torch.zeros(0, 3)
    return sd


def raw_zip(path, entries, deflate=()):
    with zipfile.ZipFile(path, "w") as z:
        for name, data in entries:
            z.writestr(name, data, compress_type=zipfile.ZIP_DEFLATED if name in deflate else zipfile.ZIP_STORED)


class _Storage:
    def __init__(self, key, numel):
        self.key, self.numel = key, numel


class _Tensor:
    def __init__(self, storage, offset, size, stride):
        self.args = (storage, offset, size, stride)

    def __reduce__(self):
        import torch

        return (torch._utils._rebuild_tensor_v2, (*self.args, False, OrderedDict()))


class _Pickler(pickle.Pickler):
    def persistent_id(self, obj):
        import torch

        if isinstance(obj, _Storage):
            return ("storage", torch.FloatStorage, obj.key, "cpu", obj.numel)
        return None


def hand_pickled(state):
    b = io.BytesIO()
    _Pickler(b, protocol=2).dump(state)
    return b.getvalue()


class _Evil:
    def __reduce__(self):
        return (os.system, ("echo diffq-must-never-run-this",))


def write_refusals(out, torch):
    torch.save({"w": _Evil()}, out / "malicious.bin")
    with zipfile.ZipFile(out / "tensors.bin") as z:
        raw_zip(out / "compressed.bin", [(i.filename, z.read(i)) for i in z.infolist()],
                deflate={n for n in z.namelist() if n.endswith("data.pkl")})
    data = torch.arange(4, dtype=torch.float32).numpy().tobytes()
    # offset 3 + size 2 needs elements 3 and 4 of a 4-element storage
    pkl = hand_pickled(OrderedDict(w=_Tensor(_Storage("0", 4), 3, (2,), (1,))))
    raw_zip(out / "bad_offset.bin", [("archive/data.pkl", pkl), ("archive/byteorder", b"little"),
                                     ("archive/data/0", data), ("archive/version", b"3\n")])
    pkl = hand_pickled(OrderedDict(w=_Tensor(_Storage("0", 64), 0, (4,), (1,))))
    raw_zip(out / "big_storage.bin", [("archive/data.pkl", pkl), ("archive/byteorder", b"little"),
                                      ("archive/data/0", data), ("archive/version", b"3\n")])


def write_sharded(out, torch):
    from diffusers import FluxTransformer2DModel

    m = FluxTransformer2DModel(patch_size=1, in_channels=4, num_layers=1, num_single_layers=0, attention_head_dim=4,
                               num_attention_heads=1, joint_attention_dim=4, pooled_projection_dim=4,
                               axes_dims_rope=(2, 2, 2))
    m.save_pretrained(out / "sharded", safe_serialization=False, max_shard_size="3KB")
    save_tensors(out / "sharded_expected.safetensors", {k: v.detach() for k, v in m.state_dict().items()})


def write_flux_int8wo(out, torch):
    import torchao.quantization as tq
    from diffusers import AutoModel, FluxPipeline, FluxTransformer2DModel, TorchAoConfig
    from torchao.prototype.safetensors.safetensors_support import flatten_tensor_state_dict

    tiny = FIXTURES / "tiny-flux"
    q = FluxTransformer2DModel.from_pretrained(tiny / "transformer", dtype=torch.float32,
                                               quantization_config=TorchAoConfig(tq.Int8WeightOnlyConfig()))
    folder = out / "flux-int8wo" / "transformer"
    q.save_pretrained(folder, safe_serialization=False)

    t = AutoModel.from_pretrained(str(folder), dtype=torch.float32, use_safetensors=False)
    tensors, expected = {}, {"dequantized": {}, "torchao_metadata": {}}
    sd = t.state_dict()
    _, md = flatten_tensor_state_dict({k + ".weight": sd[k + ".weight"] for k in DEQUANTIZED})
    for k in DEQUANTIZED:
        tensors[k + ".dequantized"] = sd[k + ".weight"].dequantize()
        expected["torchao_metadata"][k + ".weight"] = json.loads(md[k + ".weight"])
        expected["dequantized"][k] = type(sd[k + ".weight"]).__name__

    call = json.loads((FIXTURES / "flux-quantized" / "cases.json").read_text())["call"]
    pipe = FluxPipeline.from_pretrained(str(tiny), transformer=t, dtype=torch.float32)
    pipe.set_progress_bar_config(disable=True)
    final = {}

    def catch(p, i, ts, cb):
        final["latents"] = cb["latents"].clone()
        return {}

    kwargs = {k: v for k, v in call.items() if k != "seed"}
    pipe(**kwargs, generator=torch.Generator("cpu").manual_seed(call["seed"]), output_type="latent",
         callback_on_step_end=catch, callback_on_step_end_tensor_inputs=["latents"])
    tensors["latents"] = final["latents"]
    save_tensors(out / "flux_int8wo.safetensors", tensors)
    expected["call"] = call
    write_json(out / "flux_int8wo.json", expected)


SMALL_FLUX = dict(patch_size=1, in_channels=16, num_layers=1, num_single_layers=1, attention_head_dim=6,
                  num_attention_heads=1, joint_attention_dim=8, pooled_projection_dim=8, guidance_embeds=True,
                  axes_dims_rope=(2, 2, 2))
SMALL_DEQUANTIZED = ["transformer_blocks.0.attn.to_q", "single_transformer_blocks.0.proj_mlp", "proj_out"]


def write_flux_torchao(out, torch, tag, config):
    from diffusers import AutoModel, FluxPipeline, FluxTransformer2DModel, TorchAoConfig
    from torchao.prototype.safetensors.safetensors_support import flatten_tensor_state_dict

    tiny = FIXTURES / "tiny-flux"
    torch.manual_seed(19)
    dense = FluxTransformer2DModel(**SMALL_FLUX)
    src = out / f"_dense_{tag}"
    dense.save_pretrained(src)
    q = FluxTransformer2DModel.from_pretrained(src, dtype=torch.float32, quantization_config=TorchAoConfig(config))
    folder = out / f"flux-{tag}" / "transformer"
    q.save_pretrained(folder, safe_serialization=False)
    import shutil
    shutil.rmtree(src)

    t = AutoModel.from_pretrained(str(folder), dtype=torch.float32, use_safetensors=False)
    tensors, expected = {}, {"dequantized": {}, "torchao_metadata": {}}
    sd = t.state_dict()
    _, md = flatten_tensor_state_dict({k + ".weight": sd[k + ".weight"] for k in SMALL_DEQUANTIZED})
    for k in SMALL_DEQUANTIZED:
        tensors[k + ".dequantized"] = sd[k + ".weight"].dequantize()
        expected["torchao_metadata"][k + ".weight"] = json.loads(md[k + ".weight"])
        expected["dequantized"][k] = type(sd[k + ".weight"]).__name__

    call = json.loads((FIXTURES / "flux-quantized" / "cases.json").read_text())["call"]
    pipe = FluxPipeline.from_pretrained(str(tiny), transformer=t, dtype=torch.float32)
    pipe.set_progress_bar_config(disable=True)
    final = {}

    def catch(p, i, ts, cb):
        final["latents"] = cb["latents"].clone()
        return {}

    kwargs = {k: v for k, v in call.items() if k != "seed"}
    pipe(**kwargs, generator=torch.Generator("cpu").manual_seed(call["seed"]), output_type="latent",
         callback_on_step_end=catch, callback_on_step_end_tensor_inputs=["latents"])
    tensors["latents"] = final["latents"]
    save_tensors(out / f"flux_{tag}.safetensors", tensors)
    expected["call"] = call
    write_json(out / f"flux_{tag}.json", expected)


def rebuild(entries, payload):
    """A stored zip of `entries` (names, in order); payload(name) -> bytes. Local headers carry no time,
    CRC-32 of the data, an extra field ('FB', torch's id) padding each entry's data to a 64-byte offset."""
    import struct
    import zlib

    out, central = bytearray(), bytearray()
    for name in entries:
        data = payload(name)
        nb = name.encode()
        crc = zlib.crc32(data) & 0xFFFFFFFF
        off = len(out)
        base = off + 30 + len(nb) + 4
        pad = (64 - base % 64) % 64
        extra = struct.pack("<HH", 0x4246, pad) + b"Z" * pad
        out += struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, 0, 0, 0, crc, len(data), len(data), len(nb), len(extra))
        out += nb + extra + data
        central += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, 0, 0, 0, crc, len(data), len(data),
                               len(nb), 0, 0, 0, 0, 0, off) + nb
    cd_off = len(out)
    out += central
    out += struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(entries), len(entries), len(central), cd_off, 0)
    return bytes(out)


def tensor_bytes(t):
    import torch

    t = t.contiguous()
    return t.view(torch.uint8).numpy().tobytes() if t.numel() else b""


def write_single_file_recipes(out, torch):
    import hashlib
    import tempfile
    import zipfile

    from safetensors.torch import load_file

    for naming, src in [("diffusers", FIXTURES / "tiny-flux" / "transformer" / "diffusion_pytorch_model.safetensors"),
                        ("bfl", FIXTURES / "tiny-flux-single-file" / "flux1-tiny-dev.safetensors")]:
        sd = load_file(str(src))
        by_bytes = {}
        for k, v in sd.items():
            by_bytes.setdefault(tensor_bytes(v), k)
        with tempfile.TemporaryDirectory() as td:
            path = os.path.join(td, "t.bin")
            torch.save(sd, path)
            with zipfile.ZipFile(path) as z:
                names = [i.filename for i in z.infolist()]
                raw = {n: z.read(n) for n in names}
        recipe = {"source": str(src.relative_to(FIXTURES)), "entries": []}
        pkl_name = f"flux_single_file_{naming}.pkl"
        for n in names:
            data = raw[n]
            if n.endswith("/data.pkl"):
                (out / pkl_name).write_bytes(data)
                recipe["entries"].append({"name": n, "file": pkl_name})
            elif "/data/" in n:
                recipe["entries"].append({"name": n, "tensor": by_bytes[data]})
            else:
                recipe["entries"].append({"name": n, "text": data.decode()})

        def payload(n):
            e = next(e for e in recipe["entries"] if e["name"] == n)
            if "file" in e:
                return (out / e["file"]).read_bytes()
            if "tensor" in e:
                return tensor_bytes(sd[e["tensor"]])
            return e["text"].encode()

        rebuilt = rebuild(names, payload)
        with tempfile.TemporaryDirectory() as td:
            path = os.path.join(td, "r.bin")
            with open(path, "wb") as f:
                f.write(rebuilt)
            back = torch.load(path, weights_only=True)
        assert list(back) == list(sd) and all(torch.equal(back[k], sd[k]) for k in sd), naming
        recipe["sha256"] = hashlib.sha256(rebuilt).hexdigest()
        recipe["bytes"] = len(rebuilt)
        write_json(out / f"flux_single_file_{naming}.json", recipe)


def main() -> None:
    deterministic(0)
    import torch

    out = fresh_dir(FIXTURES / "torch-bin")
    sd = plain_state_dict()
    torch.save(sd, out / "tensors.bin")
    torch.save(sd, out / "tensors_p4.bin", pickle_protocol=4)
    save_tensors(out / "tensors.safetensors", {k: v.detach() for k, v in sd.items()})
    write_refusals(out, torch)
    write_sharded(out, torch)
    write_flux_int8wo(out, torch)
    import torchao.quantization as tq

    write_flux_torchao(out, torch, "int8dq", tq.Int8DynamicActivationInt8WeightConfig())
    write_flux_torchao(out, torch, "fp8wo", tq.Float8WeightOnlyConfig())
    write_single_file_recipes(out, torch)
    print(f"torch-bin: {dir_size(out)} bytes")


if __name__ == "__main__":
    main()
