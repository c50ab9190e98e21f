"""The prompt-adherence judge: a small CNN trained on the same procedural data, predicting the objects'
colour, shape, count and position from a 64x64 RGB image. Saved as models/demo-flux-classifier/
{model.safetensors, config.json}; config.json lists the layers (so a C++ port can rebuild the net) and the
label names of every head.

Network (input x in [-1, 1], [B, 3, 64, 64]):
  conv1 3->16 k3 s1 p1, relu, maxpool2      -> [B, 16, 32, 32]
  conv2 16->32 k3 s1 p1, relu, maxpool2     -> [B, 32, 16, 16]
  conv3 32->32 k3 s1 p1, relu, maxpool2     -> [B, 32, 8, 8]
  conv4 32->32 k3 s1 p1, relu               -> [B, 32, 8, 8] -> flatten (C, H, W order) -> [B, 2048]
  fc 2048->128, relu; heads: colour(8), shape(5), count(3), position(5) linear from the 128 features

    nice -n 19 python classifier.py [--steps 1500]
    python classifier.py --device cuda --time-budget 60 --batch 512 --n 60000 --out DIR   (device_train.sh)
"""
from __future__ import annotations

import argparse
import json
import math

import common as C
import dataset as D

HEADS = {"colour": D.COLOUR_NAMES, "shape": D.SHAPES, "count": [str(c) for c in D.COUNTS], "position": D.POSITIONS}


def build():
    import torch.nn as nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(3, 16, 3, padding=1)
            self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
            self.conv3 = nn.Conv2d(32, 32, 3, padding=1)
            self.conv4 = nn.Conv2d(32, 32, 3, padding=1)
            self.fc = nn.Linear(32 * 8 * 8, 128)
            self.heads = nn.ModuleDict({k: nn.Linear(128, len(v)) for k, v in HEADS.items()})

        def forward(self, x):
            import torch.nn.functional as F
            x = F.max_pool2d(F.relu(self.conv1(x)), 2)
            x = F.max_pool2d(F.relu(self.conv2(x)), 2)
            x = F.max_pool2d(F.relu(self.conv3(x)), 2)
            x = F.relu(self.conv4(x)).flatten(1)
            f = F.relu(self.fc(x))
            return {k: h(f) for k, h in self.heads.items()}
    return Net()


def labels(attrs):
    import torch
    return {"colour": torch.tensor([D.COLOUR_NAMES.index(a.colour) for a in attrs]),
            "shape": torch.tensor([D.SHAPES.index(a.shape) for a in attrs]),
            "count": torch.tensor([D.COUNTS.index(a.count) for a in attrs]),
            "position": torch.tensor([D.POSITIONS.index(a.position) for a in attrs])}


def to_input(images_u8):
    import torch
    return torch.from_numpy(images_u8).permute(0, 3, 1, 2).float().div(127.5).sub(1.0)


def load(folder=None):
    import torch
    from safetensors.torch import load_file
    net = build()
    net.load_state_dict(load_file(str((folder or C.CLASSIFIER_DIR)) + "/model.safetensors"))
    return net.eval().to(torch.float32)


def predict(net, images_u8):
    import torch
    with torch.no_grad():
        out = net(to_input(images_u8))
    return [{k: HEADS[k][int(out[k][i].argmax())] for k in HEADS} for i in range(images_u8.shape[0])]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--n", type=int, default=12000)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--out", default=str(C.CLASSIFIER_DIR), help="judge folder to write (default models/demo-flux-classifier)")
    C.add_device_args(ap)
    args = ap.parse_args()
    dev = C.setup(device=args.device)
    import numpy as np
    import torch
    import torch.nn.functional as F
    from pathlib import Path
    from safetensors.torch import save_file

    cuda = C.device_path(dev)  # the GPU code path (also on the CPU under DEMO_CPU_AS_DEVICE=1)
    out = Path(args.out)
    clock = C.Clock()
    images, _, attrs = C.data(args.n, C.SEED + 3, args.data_cache)
    y_all = {k: v.to(dev) for k, v in labels(attrs).items()}
    if cuda:  # uint8 on the GPU, converted per batch
        x_u8 = torch.from_numpy(images).to(dev).permute(0, 3, 1, 2)
        x_all = None
    else:
        x_all = to_input(images)
    del images
    print(f"data: {args.n} images in {clock():.0f}s", flush=True)
    torch.manual_seed(C.SEED + 30)
    net = build().to(dev)
    opt = torch.optim.AdamW(net.parameters(), lr=args.lr, weight_decay=1e-4, **({"fused": True} if cuda else {}))
    budget = C.Budget(args.time_budget, args.steps)
    if args.time_budget:  # OneCycle's shape (10 % warm-up, cosine down) over the elapsed fraction of the budget
        def one_cycle(step):
            p = budget.progress(step)
            return max(0.04, p / 0.1) if p < 0.1 else 0.01 + 0.99 * 0.5 * (1 + math.cos(math.pi * (p - 0.1) / 0.9))
        sched = torch.optim.lr_scheduler.LambdaLR(opt, one_cycle)
    else:
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=args.lr, total_steps=args.steps, pct_start=0.1)
    gen = torch.Generator(device=dev).manual_seed(C.SEED + 31)
    hist = []
    log_every = 500 if dev.type == "cuda" else 100
    budget.start()
    step = 0
    while not budget.stop(step):
        idx = torch.randint(0, args.n, (args.batch,), generator=gen, device=dev)
        x = x_all[idx] if x_all is not None else x_u8[idx].float().div(127.5).sub(1.0)
        x = x + 0.03 * torch.randn(x.shape, generator=gen, device=dev)  # generated images are not pixel-clean
        with C.autocast(dev):
            out_ = net(x)
            loss = sum(F.cross_entropy(out_[k].float(), y_all[k][idx]) for k in HEADS)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        hist.append(loss.detach() if cuda else loss.item())
        if step % log_every == 0 or (not args.time_budget and step == args.steps - 1):
            m = float(torch.stack(hist[-100:]).mean()) if cuda else np.mean(hist[-100:])
            print(f"step {step} loss {m:.4f} {clock():.0f}s", flush=True)
        step += 1
    train_s = budget.elapsed()
    print(f"trained {step} steps of {args.batch} in {train_s:.0f}s", flush=True)
    net = net.eval().cpu()
    vi, _, va = C.data(1000, C.SEED + 4, args.data_cache)
    pred = predict(net, vi)
    acc = {k: float(np.mean([p[k] == str(getattr(a, k)) if k == "count" else p[k] == getattr(a, k)
                             for p, a in zip(pred, va)])) for k in HEADS}
    acc["all"] = float(np.mean([all((p[k] == (str(a.count) if k == "count" else getattr(a, k))) for k in HEADS)
                                for p, a in zip(pred, va)]))
    out.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in net.state_dict().items()}, str(out / "model.safetensors"))
    cfg = dict(input="RGB 64x64, x = pixel/127.5 - 1, NCHW", image_size=D.IMAGE_SIZE, heads=HEADS,
               layers=["conv1 3->16 k3 p1, relu, maxpool2", "conv2 16->32 k3 p1, relu, maxpool2",
                       "conv3 32->32 k3 p1, relu, maxpool2", "conv4 32->32 k3 p1, relu, flatten CHW",
                       "fc 2048->128, relu", "heads.<name> 128->len(labels)"],
               heldout_accuracy=acc, steps=step, train_wall_s=round(clock(), 1))
    if args.device != "cpu" or D.DATA_VERSION != "v1":  # (today's config.json keeps its keys)
        cfg.update(batch=args.batch, device=args.device, data_version=D.DATA_VERSION, n=args.n)
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    # The fixed prompts of the adherence check, for diffq's C++ check (include/diffq/adherence.h).
    rows = [dict(prompt=p, seed=seed, expected={"colour": a.colour, "shape": a.shape, "count": str(a.count),
                                                 "position": a.position})
            for p, a, seed in D.adherence_prompts()]
    (out / "adherence_prompts.json").write_text(json.dumps(rows, indent=1) + "\n")
    print(json.dumps(cfg["heldout_accuracy"]), f"{clock():.0f}s")


if __name__ == "__main__":
    main()
