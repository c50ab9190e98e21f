"""Helpers shared by the make_*.py fixture scripts (not a script itself: the leading underscore keeps
regenerate_fixtures.sh from running it)."""
from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
CACHE = Path(__file__).resolve().parent / ".cache"


def deterministic(seed: int = 0) -> None:
    """CPU only, one thread, deterministic kernels, every RNG seeded."""
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    from diffusers.utils import logging as dlog
    from transformers.utils import logging as tlog

    dlog.set_verbosity_error()
    tlog.set_verbosity_error()
    dlog.disable_progress_bar()
    tlog.disable_progress_bar()


def fresh_dir(path: Path) -> Path:
    """Empties `path` (only ever a folder under tests/fixtures/) so stale files never survive."""
    path = Path(path).resolve()
    assert FIXTURES in path.parents, f"refusing to clear {path}: not under {FIXTURES}"
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    return path


def write_json(path: Path, obj) -> None:
    Path(path).write_text(json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


def save_tensors(path: Path, tensors: dict, metadata: dict | None = None) -> None:
    """safetensors with contiguous CPU tensors; tensor keys are sorted by the library, so the bytes are
    stable. The library writes __metadata__ keys in a random (Rust HashMap) order, so metadata with more
    than one key is folded into ONE key, "fixture", holding the JSON of the dict with sorted keys."""
    from safetensors.torch import save_file

    clean = {k: v.detach().cpu().clone().contiguous() for k, v in tensors.items()}
    if metadata and len(metadata) > 1:
        metadata = {"fixture": json.dumps(metadata, sort_keys=True)}
    save_file(clean, str(path), metadata=metadata)


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def fetch_pypi_file(requirement: str, filename: str, sha256: str, pip_args: tuple = ()) -> Path:
    """A pinned distribution file from PyPI (pip download --no-deps), cached under tools/reference/.cache
    and checked against its sha256. PyPI files are immutable, so the fixtures built from them are too."""
    CACHE.mkdir(exist_ok=True)
    path = CACHE / filename
    if not path.exists() or sha256_file(path) != sha256:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(CACHE), *pip_args,
               requirement]
        subprocess.run(cmd, check=True)
    got = sha256_file(path)
    if got != sha256:
        raise RuntimeError(f"[fetch] {filename}: sha256 {got} != pinned {sha256}")
    return path


def dir_size(path: Path) -> int:
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file() and not p.is_symlink())
