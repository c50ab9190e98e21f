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
# factor-2 VAE (one downsampling, issue 38): 64x64 images -> 32x32x16 latents -> 16x16 = 256 transformer tokens, so
# an object 12-23 pixels across spans 3-6 tokens instead of 1.5-3 (train_vae.py --factor 2)
VAE_CFG_F2 = dict(VAE_CFG, down_block_types=("DownEncoderBlock2D",) * 2, up_block_types=("UpDecoderBlock2D",) * 2,
                  block_out_channels=(32, 64))
FLUX_CFG = dict(patch_size=1, in_channels=64, out_channels=None, num_layers=2, num_single_layers=2,
                attention_head_dim=32, num_attention_heads=4, joint_attention_dim=T5_CFG["d_model"],
                pooled_projection_dim=CLIP_CFG["hidden_size"], guidance_embeds=False, axes_dims_rope=(8, 12, 12))
# FLUX.1-dev's scheduler config (dynamic shifting from the image token count)
SCHED_CFG = dict(num_train_timesteps=1000, shift=3.0, use_dynamic_shifting=True, base_shift=0.5, max_shift=1.15,
                 base_image_seq_len=256, max_image_seq_len=4096)


def setup(seed: int = SEED, device: str = "cpu"):
    """Seeds, threads, quiet loggers; returns the torch.device to train on ("cpu": today's runs, the GPU hidden;
    "cuda": bf16 autocast through autocast(), TF32 matmuls, cuDNN autotuning)."""
    import random

    import numpy as np
    import torch
    if device == "cpu":
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
    if device == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise SystemExit(f"--device {device}: torch {torch.__version__} sees no GPU")
    torch.cuda.manual_seed_all(seed)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    torch.backends.cudnn.benchmark = True
    return torch.device(device)


# DEMO_CPU_AS_DEVICE=1 (device_train.sh --dry-run): on the CPU, take the --device cuda code path (data held as
# tensors, bf16 autocast, losses read back only when logged, fused AdamW, foreach EMA) so that a dry run here
# exercises what the GPU run will execute.
CPU_AS_DEVICE = os.environ.get("DEMO_CPU_AS_DEVICE", "") == "1"


def device_path(device) -> bool:
    """Whether a script takes its --device cuda code path."""
    return device.type == "cuda" or CPU_AS_DEVICE


def autocast(device):
    """bf16 autocast on the GPU (and on the CPU under DEMO_CPU_AS_DEVICE); else nothing (today's float32)."""
    import contextlib

    import torch
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    if CPU_AS_DEVICE:
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def add_device_args(ap):
    """The options every training script shares (issue 38)."""
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                    help="cpu (default: today's runs, float32) or cuda (bf16 autocast, data held on the GPU)")
    ap.add_argument("--time-budget", type=float, default=0.0, metavar="S",
                    help="train for S seconds of wall time (the learning-rate schedule follows the elapsed fraction; "
                         "--steps still caps the steps); SIGTERM also ends training early and saves. 0: --steps only")
    ap.add_argument("--data-cache", default=os.environ.get("DEMO_DATA_CACHE", ""),
                    help="shard cache written ahead by `dataset.py --cache` (default $DEMO_DATA_CACHE); samples not "
                         "found there are rendered here")


def data(n: int, seed: int, cache: str = ""):
    """make_arrays(n, seed) from the shard cache when it holds them, else rendered (DEMO_DATA_WORKERS processes)."""
    import dataset as D
    got = D.load_cached(cache, n, seed) if cache else None
    if got is not None:
        return got
    return D.make_arrays(n, seed=seed, workers=int(os.environ.get("DEMO_DATA_WORKERS", "1")), mp_context="spawn")


class Budget:
    """Wall-clock training budget: stop() once `seconds` have passed since start() (0 = never), `steps` steps are done
    (0 = no cap) or a SIGTERM arrived (device_train.sh's timeout sends one, so the stage still saves what it has);
    progress() in [0, 1] is the larger of the two fractions."""

    def __init__(self, seconds: float = 0.0, steps: int = 0):
        import signal
        self.seconds, self.steps, self.t0, self.signalled = seconds, steps, time.time(), False

        def handler(signum, _frame):
            print(f"signal {signum}: stopping after this step", flush=True)
            self.signalled = True
        signal.signal(signal.SIGTERM, handler)

    def start(self):
        self.t0 = time.time()

    def elapsed(self) -> float:
        return time.time() - self.t0

    def progress(self, step: int) -> float:
        p = step / self.steps if self.steps else 0.0
        if self.seconds:
            p = max(p, self.elapsed() / self.seconds)
        return min(1.0, p)

    def stop(self, step: int) -> bool:
        return self.signalled or (self.steps and step >= self.steps) or \
            (self.seconds and self.elapsed() >= self.seconds)


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
