"""Step-caching fixtures: Diffusers' FirstBlockCache, TaylorSeer and MagCache on the tiny FLUX and Wan
pipelines (tests/fixtures/tiny-flux, tiny-wan, used by path), and TeaCache4FLUX's rule.

For each case: the prompt embeddings given to the pipeline, Diffusers' per-call skip decisions (recorded by
wrapping the hooks' decision methods, per cache context "cond"/"uncond"), and the final latents.
Writes tests/fixtures/cache/{flux,wan}.safetensors + cases.json.

TeaCache is not in Diffusers: its reference here follows TeaCache4FLUX/teacache_flux.py
(github.com/ali-vilab/TeaCache) with its published polynomial, applied with Diffusers-style block hooks
(the head block's norm1 gives the modulated input; a skip adds the previous residual to the image stream).
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

OUT = _common.FIXTURES / "cache"
FLUX = _common.FIXTURES / "tiny-flux"
WAN = _common.FIXTURES / "tiny-wan"

LOG: list = []


def instrument():
    """Wrap the hooks' decision points so each transformer call logs (context, computed)."""
    from diffusers.hooks import first_block_cache as fbc, mag_cache as mc, taylorseer_cache as ts

    orig_fbc = fbc.FBCHeadBlockHook.new_forward

    def fbc_forward(self, module, *a, **k):
        out = orig_fbc(self, module, *a, **k)
        st = self.state_manager.get_state()
        LOG.append((self.state_manager.context.name, bool(st.should_compute)))
        return out

    fbc.FBCHeadBlockHook.new_forward = fbc_forward

    orig_mc = mc.MagCacheHeadHook.new_forward

    def mc_forward(self, module, *a, **k):
        out = orig_mc(self, module, *a, **k)
        st = self.state_manager.get_state()
        LOG.append((self.state_manager._context.name, bool(st.should_compute)))
        return out

    mc.MagCacheHeadHook.new_forward = mc_forward

    orig_ts = ts.TaylorSeerCacheHook._measure_should_compute

    def ts_measure(self):
        should, state = orig_ts(self)
        LOG.append((id(self), self.state_manager.context.name, bool(should)))
        return should, state

    ts.TaylorSeerCacheHook._measure_should_compute = ts_measure


def taylorseer_log():
    """All hooked modules decide alike: check it and keep one module's decisions."""
    first = LOG[0][0]
    per = {}
    for mod, ctx, c in LOG:
        per.setdefault(mod, []).append((ctx, c))
    ref = per[first]
    assert all(v == ref for v in per.values()), "TaylorSeer modules disagree"
    return ref


TEACACHE_COEFFS = [4.98651651e02, -2.83781631e02, 5.58554382e01, -3.82021401e00, 2.64230861e-01]


def apply_teacache(transformer, thresh: float, num_steps: int):
    """TeaCache4FLUX's rule, with hooks on the head/other blocks (the reference for diffq's teacache)."""
    blocks = list(transformer.transformer_blocks) + list(transformer.single_transformer_blocks)
    st = {"cnt": 0, "acc": 0.0, "prev_inp": None, "prev_res": None, "compute": True, "x_in": None}
    rescale = np.poly1d(TEACACHE_COEFFS)
    head, tail = blocks[0], blocks[-1]
    head_fwd, tail_fwd = head.forward, tail.forward
    others = [(b, b.forward) for b in blocks[1:-1]]

    def head_forward(hidden_states, encoder_hidden_states, temb, *a, **k):
        inp = head.norm1(hidden_states.clone(), emb=temb.clone())[0]
        if st["cnt"] == 0 or st["cnt"] == num_steps - 1:
            compute = True
            st["acc"] = 0.0
        else:
            prev = st["prev_inp"]
            st["acc"] += rescale(((inp - prev).abs().mean() / prev.abs().mean()).cpu().item())
            if st["acc"] < thresh:
                compute = False
            else:
                compute = True
                st["acc"] = 0.0
        st["prev_inp"] = inp
        st["cnt"] += 1
        if st["cnt"] == num_steps:
            st["cnt"] = 0
        st["compute"] = compute
        LOG.append(("cond", compute))
        st["x_in"] = hidden_states
        if not compute:
            return encoder_hidden_states, hidden_states + st["prev_res"]
        return head_fwd(hidden_states, encoder_hidden_states, temb, *a, **k)

    def make_passthrough(fwd, is_tail):
        def f(hidden_states, encoder_hidden_states, temb, *a, **k):
            if not st["compute"]:
                return encoder_hidden_states, hidden_states
            e, x = fwd(hidden_states, encoder_hidden_states, temb, *a, **k)
            if is_tail:
                st["prev_res"] = x - st["x_in"]
            return e, x

        return f

    head.forward = head_forward
    for b, fwd in others:
        b.forward = make_passthrough(fwd, False)
    tail.forward = make_passthrough(tail_fwd, True)


def flux_cases():
    from diffusers import FirstBlockCacheConfig, FluxPipeline, MagCacheConfig, TaylorSeerCacheConfig
    from diffusers.hooks.mag_cache import FLUX_MAG_RATIOS

    steps = 16
    g = torch.Generator("cpu").manual_seed(1)
    pe = torch.randn(1, 8, 8, generator=g)
    pooled = torch.randn(1, 8, generator=g)
    neg_pe = torch.randn(1, 8, 8, generator=g)
    neg_pooled = torch.randn(1, 8, generator=g)
    tensors = {"prompt_embeds": pe, "pooled_prompt_embeds": pooled, "negative_prompt_embeds": neg_pe,
               "negative_pooled_prompt_embeds": neg_pooled}
    base = dict(height=32, width=32, num_inference_steps=steps, guidance_scale=3.5, output_type="latent")
    configs = [("none", None, {})]
    for t in (0.1, 0.2, 0.3, 0.5):
        configs.append((f"fbc:{t}", FirstBlockCacheConfig(threshold=t), {}))
    configs.append(("fbc:0.3,cfg", FirstBlockCacheConfig(threshold=0.3), {"true_cfg": True}))
    configs.append(("taylorseer:interval=3,order=1,before=3,dtype=bf16",
                    TaylorSeerCacheConfig(cache_interval=3, max_order=1, disable_cache_before_step=3), {}))
    configs.append(("taylorseer:interval=4,order=2,before=2,dtype=f32",
                    TaylorSeerCacheConfig(cache_interval=4, max_order=2, disable_cache_before_step=2,
                                          taylor_factors_dtype=torch.float32), {}))
    configs.append(("taylorseer:interval=2,order=1,before=3,after=12,dtype=f32",
                    TaylorSeerCacheConfig(cache_interval=2, max_order=1, disable_cache_before_step=3,
                                          disable_cache_after_step=12, taylor_factors_dtype=torch.float32), {}))
    for t in (0.06, 0.12, 0.3):
        configs.append((f"magcache:{t},max_skip=3,retention=0.2,steps={steps}",
                        MagCacheConfig(threshold=t, num_inference_steps=steps, mag_ratios=FLUX_MAG_RATIOS), {}))
    configs.append((f"magcache:0.06,max_skip=3,retention=0.2,steps={steps},calibrate",
                    MagCacheConfig(calibrate=True, num_inference_steps=steps), {}))
    for t in (0.1, 0.4, 0.8):
        configs.append((f"teacache:{t}", ("teacache", t), {}))

    cases = []
    for spec, cfg, extra in configs:
        pipe = FluxPipeline.from_pretrained(FLUX, torch_dtype=torch.float32)
        pipe.set_progress_bar_config(disable=True)
        if isinstance(cfg, tuple):
            apply_teacache(pipe.transformer, cfg[1], steps)
        elif cfg is not None:
            pipe.transformer.enable_cache(cfg)
        LOG.clear()
        kw = dict(base)
        if extra.get("true_cfg"):
            kw.update(true_cfg_scale=2.0, negative_prompt_embeds=neg_pe, negative_pooled_prompt_embeds=neg_pooled)
        with torch.no_grad():
            lat = pipe(prompt_embeds=pe, pooled_prompt_embeds=pooled, generator=torch.Generator("cpu").manual_seed(0),
                       **kw).images
        log = taylorseer_log() if spec.startswith("taylorseer") else list(LOG)
        name = f"flux_{len(cases)}"
        tensors[name] = lat.contiguous()
        cases.append({"name": name, "spec": spec, "true_cfg_scale": 2.0 if extra.get("true_cfg") else 1.0,
                      "decisions": [{"context": c, "computed": d} for c, d in log]})
        print(spec, "".join("C" if d else "s" for _, d in log))
    return cases, tensors, dict(base, seed=0)


def wan_cases():
    from diffusers import FirstBlockCacheConfig, MagCacheConfig, WanPipeline
    from diffusers.hooks.mag_cache import FLUX_MAG_RATIOS

    steps = 10
    g = torch.Generator("cpu").manual_seed(2)
    pe = torch.randn(1, 6, 8, generator=g)
    neg = torch.randn(1, 6, 8, generator=g)
    tensors = {"prompt_embeds": pe, "negative_prompt_embeds": neg}
    base = dict(height=16, width=32, num_frames=5, num_inference_steps=steps, guidance_scale=5.0, output_type="latent")
    configs = [("none", None)]
    for t in (0.05, 0.1, 0.2):
        configs.append((f"fbc:{t}", FirstBlockCacheConfig(threshold=t)))
    for t in (0.06, 0.2):
        configs.append((f"magcache:{t},max_skip=3,retention=0.2,steps={steps}",
                        MagCacheConfig(threshold=t, num_inference_steps=steps, mag_ratios=FLUX_MAG_RATIOS)))
    cases = []
    for spec, cfg in configs:
        pipe = WanPipeline.from_pretrained(WAN, torch_dtype=torch.float32)
        pipe.set_progress_bar_config(disable=True)
        if cfg is not None:
            pipe.transformer.enable_cache(cfg)
        LOG.clear()
        with torch.no_grad():
            lat = pipe(prompt_embeds=pe, negative_prompt_embeds=neg, generator=torch.Generator("cpu").manual_seed(0),
                       **base).frames
        name = f"wan_{len(cases)}"
        tensors[name] = lat.contiguous()
        cases.append({"name": name, "spec": spec, "decisions": [{"context": c, "computed": d} for c, d in LOG]})
        print(spec, " ".join(f"{c[0]}{'C' if d else 's'}" for c, d in LOG))
    return cases, tensors, dict(base, seed=0)


def main() -> None:
    _common.deterministic(0)
    instrument()
    out = _common.fresh_dir(OUT)
    fc, ft, fb = flux_cases()
    wc, wt, wb = wan_cases()
    _common.save_tensors(out / "flux.safetensors", ft)
    _common.save_tensors(out / "wan.safetensors", wt)
    _common.write_json(out / "cases.json", {"flux": {"call": fb, "cases": fc}, "wan": {"call": wb, "cases": wc}})


if __name__ == "__main__":
    main()
