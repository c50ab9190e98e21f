"""Step caches for the Diffusers peers (diffusers_bench.py, diffusers_wan_bench.py): diffq's --cache spec
(include/diffq/cache.h) turned into Diffusers' cache config, and counting what the cache skipped."""
from __future__ import annotations

NAMES = ("fbc", "taylorseer", "magcache", "teacache")


class NoPeer(Exception):
    pass


def parse_cache_token(tok: str):
    """(name, {key: value}, threshold or None) when `tok` names a cache, else None."""
    name, _, rest = tok.partition(":")
    if name not in NAMES:
        return None
    threshold, kv = None, {}
    for item in [x for x in rest.split(",") if x]:
        k, eq, v = item.partition("=")
        if not eq:
            if k == "calibrate":
                kv["calibrate"] = True
            else:
                threshold = float(k)
        else:
            kv[k] = v
    return name, kv, threshold


def cache_config(tok: str, run_steps: int):
    """The Diffusers config of a cache token, with diffq's defaults where they differ (MagCache's
    num_inference_steps: the run's step count)."""
    import torch
    from diffusers import FirstBlockCacheConfig, MagCacheConfig, TaylorSeerCacheConfig
    from diffusers.hooks.mag_cache import FLUX_MAG_RATIOS

    name, kv, threshold = parse_cache_token(tok)
    if name == "fbc":
        return FirstBlockCacheConfig(threshold=0.05 if threshold is None else threshold)
    if name == "taylorseer":
        after = kv.get("after")
        return TaylorSeerCacheConfig(
            cache_interval=int(kv.get("interval", 5)), max_order=int(kv.get("order", 1)),
            disable_cache_before_step=int(kv.get("before", 3)),
            disable_cache_after_step=None if after is None else int(after),
            taylor_factors_dtype=torch.float32 if kv.get("dtype") in ("f32", "fp32", "float32") else torch.bfloat16)
    if name == "magcache":
        return MagCacheConfig(threshold=0.06 if threshold is None else threshold,
                              max_skip_steps=int(kv.get("max_skip", 3)),
                              retention_ratio=float(kv.get("retention", 0.2)),
                              num_inference_steps=int(kv.get("steps", run_steps)),
                              mag_ratios=FLUX_MAG_RATIOS, calibrate=bool(kv.get("calibrate", False)))
    raise NoPeer("TeaCache has no Diffusers implementation (TeaCache4FLUX is a patched forward outside Diffusers): "
                 "a diffq-only row")


class CallCounter:
    """Counts transformer calls, and those in which `probe` (the last block's attention projection) ran: a call
    the cache skipped runs no forward of the last block's attention (FirstBlockCache and MagCache return the
    block's cached residual; TaylorSeer predicts the attention output)."""

    def __init__(self, transformer, probe):
        self.calls = self.computed = 0
        transformer.register_forward_pre_hook(lambda *_: self._call())
        probe.register_forward_pre_hook(lambda *_: self._computed())

    def _call(self):
        self.calls += 1

    def _computed(self):
        self.computed += 1

    def reset(self):
        self.calls = self.computed = 0

    def report(self, method: str):
        return {"method": method, "computed": self.computed, "skipped": self.calls - self.computed}
