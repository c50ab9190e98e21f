"""tests/fixtures/tiny-flux-single-file/: the tiny FLUX transformer (tests/fixtures/tiny-flux/transformer)
re-saved as a single-file checkpoint in BFL / ComfyUI naming ("model.diffusion_model.double_blocks.0...."),
the form Diffusers' FluxTransformer2DModel.from_single_file reads.

The BFL file is built by inverting the mapping, then checked with Diffusers' OWN converter
(single_file_utils.convert_flux_transformer_checkpoint_to_diffusers): converted back, every tensor must
equal the Diffusers-named original bit for bit and no key may be left over. That converter hard-codes
FLUX.1's inner_dim 3072 for the linear1 row split, so its source is re-executed with the tiny model's
inner dim substituted (the only change); from_single_file itself cannot load a non-3072 model.

Also `transformer_forward_bf16.safetensors`: Diffusers' own bf16 forward of the tiny transformer
(from_pretrained(torch_dtype=bfloat16), inputs of tiny-flux/reference/transformer_forward.safetensors cast
to bf16 as a bf16 pipeline passes them; timestep/guidance as given) -> `out` [2,64,16] bf16. The bf16
model itself is ~4e-2 (max rel) off the fp32 reference (timestep*1000 rounds in bf16, finding 7), so a bf16
port is compared with this, not with the fp32 output.

Run: tools/reference/regenerate_fixtures.sh single_file  (needs tests/fixtures/tiny-flux first).
"""
from __future__ import annotations

import inspect
import json

from _common import FIXTURES, deterministic, dir_size, fresh_dir, save_tensors

PREFIX = "model.diffusion_model."


def to_bfl(sd: dict, num_layers: int, num_single_layers: int) -> dict:
    import torch

    out = {}

    def wb(src: str, dst: str) -> None:
        for s in ("weight", "bias"):
            out[f"{dst}.{s}"] = sd[f"{src}.{s}"]

    def cat_rows(srcs: list, dst: str) -> None:
        for s in ("weight", "bias"):
            out[f"{dst}.{s}"] = torch.cat([sd[f"{x}.{s}"] for x in srcs], dim=0)

    wb("time_text_embed.timestep_embedder.linear_1", "time_in.in_layer")
    wb("time_text_embed.timestep_embedder.linear_2", "time_in.out_layer")
    wb("time_text_embed.text_embedder.linear_1", "vector_in.in_layer")
    wb("time_text_embed.text_embedder.linear_2", "vector_in.out_layer")
    if "time_text_embed.guidance_embedder.linear_1.weight" in sd:
        wb("time_text_embed.guidance_embedder.linear_1", "guidance_in.in_layer")
        wb("time_text_embed.guidance_embedder.linear_2", "guidance_in.out_layer")
    wb("context_embedder", "txt_in")
    wb("x_embedder", "img_in")
    for i in range(num_layers):
        t, b = f"transformer_blocks.{i}.", f"double_blocks.{i}."
        wb(t + "norm1.linear", b + "img_mod.lin")
        wb(t + "norm1_context.linear", b + "txt_mod.lin")
        cat_rows([t + "attn.to_q", t + "attn.to_k", t + "attn.to_v"], b + "img_attn.qkv")
        cat_rows([t + "attn.add_q_proj", t + "attn.add_k_proj", t + "attn.add_v_proj"], b + "txt_attn.qkv")
        out[b + "img_attn.norm.query_norm.scale"] = sd[t + "attn.norm_q.weight"]
        out[b + "img_attn.norm.key_norm.scale"] = sd[t + "attn.norm_k.weight"]
        out[b + "txt_attn.norm.query_norm.scale"] = sd[t + "attn.norm_added_q.weight"]
        out[b + "txt_attn.norm.key_norm.scale"] = sd[t + "attn.norm_added_k.weight"]
        wb(t + "ff.net.0.proj", b + "img_mlp.0")
        wb(t + "ff.net.2", b + "img_mlp.2")
        wb(t + "ff_context.net.0.proj", b + "txt_mlp.0")
        wb(t + "ff_context.net.2", b + "txt_mlp.2")
        wb(t + "attn.to_out.0", b + "img_attn.proj")
        wb(t + "attn.to_add_out", b + "txt_attn.proj")
    for i in range(num_single_layers):
        t, b = f"single_transformer_blocks.{i}.", f"single_blocks.{i}."
        wb(t + "norm.linear", b + "modulation.lin")
        cat_rows([t + "attn.to_q", t + "attn.to_k", t + "attn.to_v", t + "proj_mlp"], b + "linear1")
        out[b + "norm.query_norm.scale"] = sd[t + "attn.norm_q.weight"]
        out[b + "norm.key_norm.scale"] = sd[t + "attn.norm_k.weight"]
        wb(t + "proj_out", b + "linear2")
    wb("proj_out", "final_layer.linear")
    for s in ("weight", "bias"):  # Diffusers (scale, shift) -> BFL (shift, scale)
        scale, shift = sd[f"norm_out.linear.{s}"].chunk(2, dim=0)
        out[f"final_layer.adaLN_modulation.1.{s}"] = torch.cat([shift, scale], dim=0)
    return {PREFIX + k: v.contiguous() for k, v in out.items()}


def diffusers_converter(inner_dim: int):
    """Diffusers' own BFL -> Diffusers converter with FLUX.1's hard-coded inner_dim replaced."""
    from diffusers.loaders import single_file_utils as sfu

    src = inspect.getsource(sfu.convert_flux_transformer_checkpoint_to_diffusers)
    assert src.count("inner_dim = 3072") == 1, "diffusers' converter changed; revisit this script"
    src = src.replace("inner_dim = 3072", f"inner_dim = {inner_dim}")
    ns = dict(vars(sfu))
    exec(compile(src, sfu.__file__, "exec"), ns)
    return ns["convert_flux_transformer_checkpoint_to_diffusers"]


def main() -> None:
    deterministic(0)
    import torch
    from safetensors.torch import load_file

    src_dir = FIXTURES / "tiny-flux" / "transformer"
    cfg = json.loads((src_dir / "config.json").read_text())
    sd = load_file(str(src_dir / "diffusion_pytorch_model.safetensors"))
    bfl = to_bfl(sd, cfg["num_layers"], cfg["num_single_layers"])

    inner = cfg["num_attention_heads"] * cfg["attention_head_dim"]
    back = diffusers_converter(inner)({k: v.clone() for k, v in bfl.items()})
    assert set(back) == set(sd), f"key sets differ: {sorted(set(back) ^ set(sd))}"
    for k in sd:
        assert torch.equal(back[k], sd[k]), f"{k} differs after Diffusers' conversion"

    out_dir = fresh_dir(FIXTURES / "tiny-flux-single-file")
    save_tensors(out_dir / "flux1-tiny-dev.safetensors", bfl)
    ref = load_file(str(FIXTURES / "tiny-flux" / "reference" / "transformer_forward.safetensors"))
    from diffusers import FluxTransformer2DModel

    bf16 = torch.bfloat16
    model = FluxTransformer2DModel.from_pretrained(str(src_dir), torch_dtype=bf16)
    with torch.no_grad():
        out = model(hidden_states=ref["in.hidden_states"].to(bf16),
                    encoder_hidden_states=ref["in.encoder_hidden_states"].to(bf16),
                    pooled_projections=ref["in.pooled_projections"].to(bf16), timestep=ref["in.timestep"],
                    guidance=ref["in.guidance"], txt_ids=ref["in.txt_ids"], img_ids=ref["in.img_ids"]).sample
    save_tensors(out_dir / "transformer_forward_bf16.safetensors", {"out": out})
    print(f"tiny-flux-single-file: {len(bfl)} tensors, {dir_size(out_dir)} bytes; Diffusers' converter "
          f"gives back all {len(sd)} tensors exactly")


if __name__ == "__main__":
    main()
