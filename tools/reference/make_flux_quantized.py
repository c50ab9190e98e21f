"""tests/fixtures/flux-quantized/: the tiny dev pipeline (tests/fixtures/tiny-flux) run by Diffusers with
pipeline-level quantization of the transformer, one backend/scheme at a time, on the CPU: what diffq's
`--quant <scheme>` must come close to.

`latents.safetensors`: `<scheme>` = the packed latents after the last step (caught with
callback_on_step_end), and `none` for the unquantized pipeline. `cases.json`: the call (prompt, size,
steps, guidance, seed, max_sequence_length), and per scheme the PipelineQuantizationConfig kwargs used,
or the reason Diffusers cannot run it on a CPU (then diffq is compared with `none`, bound documented).

`latents_gguf.safetensors`: the same call with the GGUF block types diffq quantizes to (`--quant q8_0` ...),
which Diffusers has no quantize-on-load for: every nn.Linear of the transformer whose in_features is a whole
number of the type's blocks gets its float32 weight quantized by ggml's reference quantizer (ggml-python's
ggml_quantize_chunk, no importance matrix) and dequantized by gguf-py (float32), then Diffusers runs the
pipeline with those weights. `cases.json` "gguf": per type the ggml type and the Linear layers replaced.

Run: tools/reference/regenerate_fixtures.sh flux_quantized  (needs tests/fixtures/tiny-flux first).
"""
from __future__ import annotations

import traceback

from _common import FIXTURES, deterministic, dir_size, fresh_dir, save_tensors, write_json

CALL = dict(prompt="A photo of a Cat sitting on a RED chair, 4k!!", height=32, width=32, num_inference_steps=2,
            guidance_scale=3.5, seed=0, max_sequence_length=64)

GGUF_SCHEMES = {"q8_0": "Q8_0", "q4_0": "Q4_0", "q4_K": "Q4_K", "q6_K": "Q6_K"}

SCHEMES = {
    "nf4": ("bitsandbytes_4bit", dict(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype="float32")),
    "fp4": ("bitsandbytes_4bit", dict(load_in_4bit=True, bnb_4bit_quant_type="fp4", bnb_4bit_compute_dtype="float32")),
    "int8": ("bitsandbytes_8bit", dict(load_in_8bit=True)),
    "int8wo": ("torchao", "Int8WeightOnlyConfig"),
    "int8dq": ("torchao", "Int8DynamicActivationInt8WeightConfig"),
    "fp8wo": ("torchao", "Float8WeightOnlyConfig"),
    "quanto-int8": ("quanto", dict(weights_dtype="int8")),
    "quanto-int4": ("quanto", dict(weights_dtype="int4")),
    "quanto-int2": ("quanto", dict(weights_dtype="int2")),
    "quanto-fp8": ("quanto", dict(weights_dtype="float8")),
}


def main() -> None:
    deterministic(0)
    import torch
    from diffusers import FluxPipeline
    from diffusers.quantizers import PipelineQuantizationConfig

    # Diffusers' bitsandbytes quantizers refuse to run without a GPU (validate_environment), although
    # bitsandbytes 0.50 quantizes and runs Linear4bit/Linear8bitLt on the CPU: the check is lifted and the
    # default device map (torch.cuda.current_device()) becomes the CPU.
    from diffusers.quantizers.bitsandbytes import bnb_quantizer

    for cls in (bnb_quantizer.BnB4BitDiffusersQuantizer, bnb_quantizer.BnB8BitDiffusersQuantizer):
        cls.validate_environment = lambda self, *a, **k: None
        cls.update_device_map = lambda self, device_map: device_map or {"": "cpu"}

    out_dir = fresh_dir(FIXTURES / "flux-quantized")
    kwargs = {k: v for k, v in CALL.items() if k != "seed"}
    tensors, cases = {}, {"call": CALL, "schemes": {}}

    def run(pipe):
        final = {}

        def catch(p, i, t, cb):
            final["latents"] = cb["latents"].clone()
            return {}

        pipe.set_progress_bar_config(disable=True)
        pipe(**kwargs, generator=torch.Generator("cpu").manual_seed(CALL["seed"]), output_type="latent",
             callback_on_step_end=catch, callback_on_step_end_tensor_inputs=["latents"])
        return final["latents"]

    tensors["none"] = run(FluxPipeline.from_pretrained(FIXTURES / "tiny-flux", dtype=torch.float32))
    for name, (backend, kw) in SCHEMES.items():
        try:
            if backend == "torchao":
                import torchao.quantization as tq
                from diffusers import TorchAoConfig

                q = PipelineQuantizationConfig(quant_mapping={"transformer": TorchAoConfig(getattr(tq, kw)())})
                desc = {"quant_backend": backend, "quant_type": kw}
            elif backend == "quanto":  # transformers' QuantoConfig differs: Diffusers asks for a mapping
                from diffusers import QuantoConfig

                q = PipelineQuantizationConfig(quant_mapping={"transformer": QuantoConfig(**kw)})
                desc = {"quant_backend": backend, "quant_kwargs": kw}
            else:
                q = PipelineQuantizationConfig(quant_backend=backend, quant_kwargs=kw,
                                               components_to_quantize=["transformer"])
                desc = {"quant_backend": backend, "quant_kwargs": kw}
            pipe = FluxPipeline.from_pretrained(FIXTURES / "tiny-flux", dtype=torch.float32, quantization_config=q)
            tensors[name] = run(pipe)
            cases["schemes"][name] = desc
        except Exception as e:  # noqa: BLE001 - recorded in the fixture: what the library cannot do here
            cases["schemes"][name] = {"quant_backend": backend, "unavailable": f"{type(e).__name__}: {e}"[:300]}
            traceback.print_exc()
    save_tensors(out_dir / "latents.safetensors", tensors)

    # GGUF: ggml's quantizer + gguf-py's dequantization, in the Diffusers pipeline.
    import gguf
    from gguf.constants import GGML_QUANT_SIZES
    from make_quant_gguf import ggml_quantize

    gguf_tensors, cases["gguf"] = {}, {}
    for name, tname in GGUF_SCHEMES.items():
        qtype = gguf.GGMLQuantizationType[tname]
        block = GGML_QUANT_SIZES[qtype][0]
        pipe = FluxPipeline.from_pretrained(FIXTURES / "tiny-flux", dtype=torch.float32)
        replaced = []
        with torch.no_grad():
            for mname, mod in sorted(pipe.transformer.named_modules()):
                if isinstance(mod, torch.nn.Linear) and mod.in_features % block == 0:
                    w = mod.weight.detach().to(torch.float32).numpy()
                    deq = gguf.quants.dequantize(ggml_quantize(w, qtype), qtype).astype("float32").reshape(w.shape)
                    mod.weight.copy_(torch.from_numpy(deq))
                    replaced.append(mname)
        gguf_tensors[name] = run(pipe)
        cases["gguf"][name] = {"ggml_type": tname, "block_size": block, "linear_layers": replaced}
    save_tensors(out_dir / "latents_gguf.safetensors", gguf_tensors)
    write_json(out_dir / "cases.json", cases)
    print(f"flux-quantized: {dir_size(out_dir)} bytes")


if __name__ == "__main__":
    main()
