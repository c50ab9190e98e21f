"""Paths, configurations and helpers shared by the demo training scripts."""
from __future__ import annotations

import os
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODEL_DIR = ROOT / "models" / "demo-flux"
CLASSIFIER_DIR = ROOT / "models" / "demo-flux-classifier"
WORK = Path(os.environ.get("DEMO_WORK", "/tmp/demo-flux-work"))  # intermediate checkpoints, caches

SEED = 0
IMAGE_SIZE = 64
MAX_SEQ = 32   # T5 tokens the model is trained with; generate with --max-sequence-length 32
# Torch threads. 1 by default: the published run used one pinned core (`taskset -c 1`), which keeps the run
# fast beside other work on a 2-core machine (torch's thread barriers collapse when another process takes a
# core) and makes the weights independent of the machine's core count. DEMO_THREADS=2 on an idle machine.
NUM_THREADS = int(os.environ.get("DEMO_THREADS", "1"))

CLIP_CFG = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
                max_position_embeddings=77, hidden_act="quick_gelu", projection_dim=64, layer_norm_eps=1e-5,
                attention_dropout=0.0)
T5_CFG = dict(d_model=64, d_kv=32, d_ff=128, num_layers=2, num_heads=2, relative_attention_num_buckets=32,
              relative_attention_max_distance=128, feed_forward_proj="gated-gelu", dropout_rate=0.0,
              layer_norm_epsilon=1e-6, tie_word_embeddings=False, is_encoder_decoder=False, use_cache=False,
              pad_token_id=0, eos_token_id=1, decoder_start_token_id=0)
# factor-4 VAE (two downsamplings): 64x64 images -> 16x16x16 latents -> 8x8 = 64 transformer tokens
VAE_CFG = dict(in_channels=3, out_channels=3,
               down_block_types=("DownEncoderBlock2D",) * 3, up_block_types=("UpDecoderBlock2D",) * 3,
               block_out_channels=(16, 32, 32), layers_per_block=1, act_fn="silu", latent_channels=16,
               norm_num_groups=8, sample_size=IMAGE_SIZE, force_upcast=True, use_quant_conv=False,
               use_post_quant_conv=False, mid_block_add_attention=True)
FLUX_CFG = dict(patch_size=1, in_channels=64, out_channels=None, num_layers=2, num_single_layers=2,
                attention_head_dim=32, num_attention_heads=4, joint_attention_dim=T5_CFG["d_model"],
                pooled_projection_dim=CLIP_CFG["hidden_size"], guidance_embeds=False, axes_dims_rope=(8, 12, 12))
# FLUX.1-dev's scheduler config (dynamic shifting from the image token count)
SCHED_CFG = dict(num_train_timesteps=1000, shift=3.0, use_dynamic_shifting=True, base_shift=0.5, max_shift=1.15,
                 base_image_seq_len=256, max_image_seq_len=4096)


def setup(seed: int = SEED):
    import random

    import numpy as np
    import torch
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
    torch.set_num_threads(NUM_THREADS)
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    WORK.mkdir(parents=True, exist_ok=True)
    from diffusers.utils import logging as dlog
    from transformers.utils import logging as tlog
    dlog.set_verbosity_error()
    tlog.set_verbosity_error()


class Clock:
    def __init__(self):
        self.t0 = time.time()

    def __call__(self) -> float:
        return time.time() - self.t0


def mu_for(image_seq_len: int) -> float:
    """FluxPipeline's calculate_shift with the scheduler config above."""
    c = SCHED_CFG
    m = (c["max_shift"] - c["base_shift"]) / (c["max_image_seq_len"] - c["base_image_seq_len"])
    return image_seq_len * m + c["base_shift"] - m * c["base_image_seq_len"]


def pack(latents):
    """[B, C, H, W] -> [B, H/2*W/2, C*4] as FluxPipeline._pack_latents."""
    b, c, h, w = latents.shape
    x = latents.view(b, c, h // 2, 2, w // 2, 2).permute(0, 2, 4, 1, 3, 5)
    return x.reshape(b, (h // 2) * (w // 2), c * 4)


def image_ids(h2: int, w2: int):
    import torch
    ids = torch.zeros(h2, w2, 3)
    ids[..., 1] = torch.arange(h2)[:, None]
    ids[..., 2] = torch.arange(w2)[None, :]
    return ids.reshape(h2 * w2, 3)
