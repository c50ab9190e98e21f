"""tests/fixtures/lora-nf4/: PEFT LoRAs on a bitsandbytes nf4 base, run by Diffusers + PEFT + bitsandbytes on the CPU.

The tiny dev pipeline (tests/fixtures/tiny-flux) is loaded with the pipeline-level quantization config of
tests/fixtures/flux-quantized's "nf4" scheme (bitsandbytes_4bit, nf4, float32 compute, transformer only), then
FluxPipeline.load_lora_weights puts PEFT's lora.bnb.Linear4bit around every targeted bnb Linear4bit: the base
layer runs bitsandbytes' 4-bit matmul, the LoRA runs beside it in float32. The LoRA files are
tests/fixtures/lora/*.safetensors (make_lora_fixtures.py), used by path.

bitsandbytes 0.50.2 on a CPU with AVX-512 (BF16) cannot run the tiny model as it runs it on other CPUs, whatever
the LoRA (the failure needs no LoRA at all):
  1. Linear4bit.forward repacks the weight for its AVX512-BF16 kernel (functional._convert_weight_packed_for_cpu)
     when the CPU has AVX512-BF16, the module is in eval mode and x needs no grad; the repacking reshapes absmax to
     [out_features, in_features // blocksize] and fails for in_features < 64 ("shape '[32, 0]' is invalid for
     input of size 8" on x_embedder, in_features 16) or not a multiple of 64 (44 of the tiny model's 50 Linears).
     That kernel also computes in bfloat16 whatever bnb_4bit_compute_dtype says.
  2. With the repacking off, dequantize_4bit's CPU kernel (native cdequantize_blockwise_cpu_nf4_fp32, AVX-512
     branch, taken when in_features % 16 == 0) reads the block scale of element (row, k) at absmax[row *
     (in_features // blocksize) + k // blocksize]: it assumes blocks never cross rows, while quantize_4bit blocks
     the flattened weight. For in_features % 64 != 0 every row gets wrong scales (silently; 5.9e-3 off on the
     latents here).
Real FLUX Linears (in_features 64, 256, 768, 3072, 4096, 12288) avoid both; the tiny model does not. So this script
makes bitsandbytes take the paths it takes on a CPU without AVX-512, the paths that made flux-quantized's nf4
latents (an AVX2 machine): each Linear4bit's `support_avx512bf16_for_cpu` is set to False (its own switch, set in
__init__ from has_avx512bf16()), and the CPU kernel of bitsandbytes::dequantize_4bit is bitsandbytes' own default
backend implementation (backends/default/ops.py, the one bnb itself falls back to for odd shapes). The rest is
bnb's: quantize_4bit, matmul_4bit -> gemm_4bit (dequantize + F.linear in float32). The nf4 base without LoRA is
compared with flux-quantized's nf4 latents and the figure recorded ("nf4_none_vs_flux_quantized"): it must be
float32 rounding (~1e-7), which shows the paths are those of the machine that made that fixture.

latents.safetensors (packed final latents, caught with callback_on_step_end):
  nf4_none: the nf4 pipeline alone; nf4_peft_a: + peft_a.safetensors as "a" (weight 1);
  nf4_two: + peft_a as "a" and peft_b_alpha.safetensors as "b", set_adapters(["a", "b"], [0.7, -0.4]).
cases.json: the call, the quantization config (PipelineQuantizationConfig JSON as diffq takes it), the adapters,
the machine's CPU flags and the cross-check figure.

Run: cd tools/reference && CUDA_VISIBLE_DEVICES= HF_HUB_OFFLINE=1 ../.venv/bin/python make_lora_nf4.py
"""
from __future__ import annotations

from _common import FIXTURES, deterministic, dir_size, fresh_dir, save_tensors, write_json

CALL = dict(prompt="A photo of a Cat sitting on a RED chair, 4k!!", height=32, width=32, num_inference_steps=2,
            guidance_scale=3.5, seed=0, max_sequence_length=64)
# flux-quantized's "nf4" scheme (make_flux_quantized.py), as diffq's quantization_config_json takes it.
QUANT = {"quant_backend": "bitsandbytes_4bit", "components_to_quantize": ["transformer"],
         "quant_kwargs": {"load_in_4bit": True, "bnb_4bit_quant_type": "nf4", "bnb_4bit_compute_dtype": "float32"}}
LORA = FIXTURES / "lora"
ONE = {"files": ["peft_a.safetensors"], "names": ["a"]}
TWO = {"files": ["peft_a.safetensors", "peft_b_alpha.safetensors"], "names": ["a", "b"], "weights": [0.7, -0.4]}


def bnb_generic_cpu_paths() -> None:
    """bitsandbytes' dequantize_4bit on the CPU: its default (device-independent) kernel, see the docstring."""
    import torch
    from bitsandbytes.backends.default.ops import _dequantize_4bit_compute
    from bitsandbytes.backends.utils import _get_4bit_code

    eager = getattr(_dequantize_4bit_compute, "__wrapped__", _dequantize_4bit_compute)  # bnb's torch.compile wrapper

    def dequantize_4bit_default(A, absmax, blocksize, quant_type, shape, dtype):  # = backends/default's kernel
        if A.dtype != torch.uint8:
            A = A.view(torch.uint8)
        return eager(A.reshape(-1), absmax, _get_4bit_code(quant_type, A.device), blocksize, shape, dtype)

    torch.library.register_kernel("bitsandbytes::dequantize_4bit", "cpu", dequantize_4bit_default)


def main() -> None:
    deterministic(0)
    import bitsandbytes as bnb
    import bitsandbytes.functional as bnbf
    import torch
    from diffusers import FluxPipeline
    from diffusers.quantizers import PipelineQuantizationConfig
    from diffusers.quantizers.bitsandbytes import bnb_quantizer
    from safetensors import safe_open

    # As make_flux_quantized.py: Diffusers' bnb quantizer refuses to run without a GPU and maps to cuda:0.
    for cls in (bnb_quantizer.BnB4BitDiffusersQuantizer, bnb_quantizer.BnB8BitDiffusersQuantizer):
        cls.validate_environment = lambda self, *a, **k: None
        cls.update_device_map = lambda self, device_map: device_map or {"": "cpu"}
    # As make_lora_fixtures.py: transformers 5.24's PEFT version gate (>= 0.22) vs the pinned peft 0.21.2.
    import transformers.integrations.peft as tpeft
    tpeft.check_peft_version = lambda *a, **kw: None

    had_avx512bf16 = bool(bnbf.has_avx512bf16())
    bnb_generic_cpu_paths()
    out = fresh_dir(FIXTURES / "lora-nf4")
    kwargs = {k: v for k, v in CALL.items() if k != "seed"}

    def load():
        q = PipelineQuantizationConfig(quant_backend=QUANT["quant_backend"], quant_kwargs=QUANT["quant_kwargs"],
                                       components_to_quantize=QUANT["components_to_quantize"])
        p = FluxPipeline.from_pretrained(FIXTURES / "tiny-flux", dtype=torch.float32, quantization_config=q)
        p.set_progress_bar_config(disable=True)
        n = 0
        for m in p.transformer.modules():
            if isinstance(m, bnb.nn.Linear4bit):
                m.support_avx512bf16_for_cpu = False
                n += 1
        assert n == 50, n  # every Linear of the tiny transformer is quantized
        return p

    def run(pipe):
        final = {}

        def catch(p, i, t, cb):
            final["latents"] = cb["latents"].clone()
            return {}

        pipe(**kwargs, generator=torch.Generator("cpu").manual_seed(CALL["seed"]), output_type="latent",
             callback_on_step_end=catch, callback_on_step_end_tensor_inputs=["latents"])
        return final["latents"]

    lat = {}
    lat["nf4_none"] = run(load())

    pipe = load()
    pipe.load_lora_weights(str(LORA / ONE["files"][0]), adapter_name=ONE["names"][0])
    kinds = {type(m).__module__ + "." + type(m).__name__ for n, m in pipe.transformer.named_modules()
             if hasattr(m, "lora_A") and "a" in m.lora_A}
    assert kinds == {"peft.tuners.lora.bnb.Linear4bit"}, kinds  # the LoRA runs beside bnb's 4-bit Linear
    lat["nf4_peft_a"] = run(pipe)

    pipe = load()
    for f, n in zip(TWO["files"], TWO["names"]):
        pipe.load_lora_weights(str(LORA / f), adapter_name=n)
    pipe.set_adapters(TWO["names"], adapter_weights=TWO["weights"])
    lat["nf4_two"] = run(pipe)

    with safe_open(str(FIXTURES / "flux-quantized" / "latents.safetensors"), "pt") as f:
        ref = f.get_tensor("nf4")
    cross = float((lat["nf4_none"] - ref).abs().max() / ref.abs().max())
    print("nf4_none vs flux-quantized nf4:", cross)
    assert cross < 1e-6, cross
    moved = {k: float((v - lat["nf4_none"]).abs().max() / lat["nf4_none"].abs().max())
             for k, v in lat.items() if k != "nf4_none"}
    print("moved by the LoRA:", moved)

    save_tensors(out / "latents.safetensors", lat)
    write_json(out / "cases.json", {
        "generator": "tools/reference/make_lora_nf4.py",
        "call": CALL,
        "quantization_config": QUANT,
        "lora_dir": "tests/fixtures/lora",
        "one": ONE,
        "two": TWO,
        "bnb_cpu_paths": "Linear4bit.support_avx512bf16_for_cpu=False; dequantize_4bit CPU kernel = bitsandbytes' "
                         "default backend kernel (as on a CPU without AVX-512)",
        "machine": {"torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
                    "bnb_has_avx512bf16": had_avx512bf16},
        "versions": {"bitsandbytes": bnb.__version__, "torch": torch.__version__,
                     "diffusers": __import__("diffusers").__version__, "peft": __import__("peft").__version__},
        "nf4_none_vs_flux_quantized": cross,
        "moved_by_lora": moved,
    })
    print(f"lora-nf4: {dir_size(out)} bytes")


if __name__ == "__main__":
    main()
