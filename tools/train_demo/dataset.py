"""Procedural captioned images for the demo model (issue 22).

Every image holds 1-3 copies of ONE shape in ONE colour, placed in one region of the canvas, on a plain
background. The caption is written from the same draw, with this grammar (optional parts in brackets):

    caption  := COUNT [SIZE] COLOUR SHAPE(S) [POSITION] [on a BG background]
    COUNT    := "a" | "one" (1) | "two" (2) | "three" (3)
    SIZE     := "small" | "large"
    COLOUR   := red | green | blue | yellow | orange | purple | white | black
    SHAPE    := circle | square | triangle | star | ring      (plural: + "s")
    POSITION := "on the left" | "on the right" | "at the top" | "at the bottom" | "in the centre"/"in the center"
    BG       := white | black | gray                           (never the object's colour)

The attributes are always drawn; the optional caption parts are left out with fixed probabilities so the
model also answers short prompts ("a red circle"). Deterministic: sample(i, seed) depends only on (seed, i).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageDraw

SHAPES = ["circle", "square", "triangle", "star", "ring"]
COLOURS = {"red": (220, 30, 30), "green": (30, 170, 50), "blue": (30, 60, 220), "yellow": (240, 220, 30),
           "orange": (245, 140, 20), "purple": (140, 40, 170), "white": (245, 245, 245), "black": (15, 15, 15)}
BACKGROUNDS = {"white": (250, 250, 250), "black": (10, 10, 10), "gray": (128, 128, 128)}
COUNTS = [1, 2, 3]
COUNT_WORDS = {1: ["a", "one"], 2: ["two"], 3: ["three"]}
POSITIONS = ["left", "right", "top", "bottom", "centre"]
POSITION_PHRASES = {"left": ["on the left"], "right": ["on the right"], "top": ["at the top"],
                    "bottom": ["at the bottom"], "centre": ["in the centre", "in the center"]}
SIZES = ["small", "large"]
COLOUR_NAMES = list(COLOURS)
BG_NAMES = list(BACKGROUNDS)

# Region (x0, y0, x1, y1) in [0, 1] that each object's bounding box must lie in.
REGIONS = {"left": (0.03, 0.03, 0.47, 0.97), "right": (0.53, 0.03, 0.97, 0.97),
           "top": (0.03, 0.03, 0.97, 0.47), "bottom": (0.03, 0.53, 0.97, 0.97),
           "centre": (0.2, 0.2, 0.8, 0.8)}
DIAMETER = {"small": (0.16, 0.20), "large": (0.28, 0.34)}  # fraction of the side

# Probabilities that an optional caption part is written.
P_SIZE, P_POSITION, P_BACKGROUND = 0.5, 0.85, 0.7

IMAGE_SIZE = 64
SUPERSAMPLE = 4


@dataclass(frozen=True)
class Attributes:
    shape: str
    colour: str
    count: int
    position: str
    size: str
    background: str


def caption_of(a: Attributes, rng: np.random.Generator | None = None, full: bool = False) -> str:
    """The caption for `a`; with `full` (or no rng) every optional part is written, first synonym."""
    def pick(options):
        return options[0] if rng is None else options[int(rng.integers(len(options)))]
    def keep(p):
        return full or rng is None or rng.random() < p
    words = [pick(COUNT_WORDS[a.count])]
    if keep(P_SIZE):
        words.append(a.size)
    words.append(a.colour)
    words.append(a.shape + ("s" if a.count > 1 else ""))
    if keep(P_POSITION):
        words.append(pick(POSITION_PHRASES[a.position]))
    if keep(P_BACKGROUND):
        words.append(f"on a {a.background} background")
    return " ".join(words)


def random_attributes(rng: np.random.Generator) -> Attributes:
    colour = COLOUR_NAMES[int(rng.integers(len(COLOUR_NAMES)))]
    bgs = [b for b in BG_NAMES if b != colour]
    return Attributes(shape=SHAPES[int(rng.integers(len(SHAPES)))], colour=colour,
                      count=COUNTS[int(rng.integers(len(COUNTS)))],
                      position=POSITIONS[int(rng.integers(len(POSITIONS)))],
                      size=SIZES[int(rng.integers(len(SIZES)))], background=bgs[int(rng.integers(len(bgs)))])


def _place(a: Attributes, rng: np.random.Generator) -> list[tuple[float, float, float]]:
    """(cx, cy, diameter) in [0, 1] units, non-overlapping, inside the region."""
    x0, y0, x1, y1 = REGIONS[a.position]
    lo, hi = DIAMETER[a.size]
    d = float(rng.uniform(lo, hi))
    for _ in range(8):
        for _ in range(200):
            pts = [(float(rng.uniform(x0 + d / 2, x1 - d / 2)), float(rng.uniform(y0 + d / 2, y1 - d / 2)))
                   for _ in range(a.count)]
            if all(math.dist(p, q) >= 1.08 * d for i, p in enumerate(pts) for q in pts[i + 1:]):
                return [(x, y, d) for x, y in pts]
        d *= 0.9  # crowded (three large objects in the centre): shrink and retry
    raise RuntimeError(f"cannot place {a}")


def _draw_shape(draw: ImageDraw.ImageDraw, shape: str, cx: float, cy: float, r: float, fill, bg,
                angle: float) -> None:
    if shape == "circle":
        draw.ellipse((cx - r, cy - r, cx + r, cy + r), fill=fill)
    elif shape == "ring":
        draw.ellipse((cx - r, cy - r, cx + r, cy + r), fill=fill)
        ri = 0.55 * r
        draw.ellipse((cx - ri, cy - ri, cx + ri, cy + ri), fill=bg)
    elif shape == "square":
        s = 0.85 * r
        draw.rectangle((cx - s, cy - s, cx + s, cy + s), fill=fill)
    elif shape == "triangle":
        pts = [(cx + r * math.cos(angle + k * 2 * math.pi / 3), cy + r * math.sin(angle + k * 2 * math.pi / 3))
               for k in range(3)]
        draw.polygon(pts, fill=fill)
    elif shape == "star":
        pts = []
        for k in range(10):
            rr = r if k % 2 == 0 else 0.42 * r
            t = angle + k * math.pi / 5
            pts.append((cx + rr * math.cos(t), cy + rr * math.sin(t)))
        draw.polygon(pts, fill=fill)
    else:
        raise ValueError(shape)


def render(a: Attributes, rng: np.random.Generator, size: int = IMAGE_SIZE) -> Image.Image:
    big = size * SUPERSAMPLE
    bg = BACKGROUNDS[a.background]
    img = Image.new("RGB", (big, big), bg)
    draw = ImageDraw.Draw(img)
    fill = COLOURS[a.colour]
    for cx, cy, d in _place(a, rng):
        # point-up triangles and stars (a small jitter only), so "triangle" keeps one look
        angle = -math.pi / 2 + float(rng.uniform(-0.15, 0.15))
        _draw_shape(draw, a.shape, cx * big, cy * big, d * big / 2, fill, bg, angle)
    return img.resize((size, size), Image.Resampling.BOX)


def sample(index: int, seed: int = 0, size: int = IMAGE_SIZE) -> tuple[Image.Image, str, Attributes]:
    rng = np.random.default_rng([seed, index])
    a = random_attributes(rng)
    img = render(a, rng, size)
    return img, caption_of(a, rng), a


def make_arrays(n: int, seed: int = 0, size: int = IMAGE_SIZE):
    """uint8 images [n, size, size, 3], captions, attributes."""
    images = np.empty((n, size, size, 3), dtype=np.uint8)
    caps, attrs = [], []
    for i in range(n):
        img, c, a = sample(i, seed, size)
        images[i] = np.asarray(img)
        caps.append(c)
        attrs.append(a)
    return images, caps, attrs


def make_shape_groups(n_groups: int, seed: int = 0, size: int = IMAGE_SIZE):
    """Like make_arrays, in groups of len(SHAPES): one draw of the attributes, the placement and the caption, drawn
    once with every shape (same positions, sizes, angles; the caption's shape word swapped). Each image and caption
    is still a sample of the same distribution; a batch of whole groups shows the model what only the shape word
    changes. uint8 images [n_groups * 5, size, size, 3], captions, attributes, in group order."""
    images = np.empty((n_groups * len(SHAPES), size, size, 3), dtype=np.uint8)
    caps, attrs = [], []
    for g in range(n_groups):
        rng = np.random.default_rng([seed, g, 1])
        base = random_attributes(rng)
        state = rng.bit_generator.state
        for j, shape in enumerate(SHAPES):
            a = dataclasses.replace(base, shape=shape)
            rng.bit_generator.state = state  # the same placement and angles for every shape
            images[g * len(SHAPES) + j] = np.asarray(render(a, rng, size))
            cap_rng = np.random.default_rng([seed, g, 2])  # the same optional parts and synonyms
            caps.append(caption_of(a, cap_rng))
            attrs.append(a)
    return images, caps, attrs


def vocabulary() -> list[str]:
    """Every word the grammar can write."""
    words = {"a", "one", "two", "three", "on", "the", "at", "in", "background"}
    words |= set(SIZES) | set(COLOURS) | set(BACKGROUNDS)
    words |= set(SHAPES) | {s + "s" for s in SHAPES}
    words |= {"left", "right", "top", "bottom", "centre", "center"}
    return sorted(words)


# What a caption says, read back with the grammar above: the attribute heads of train_flux.py's --aux-attributes.
LABELS = {"shape": SHAPES, "colour": COLOUR_NAMES, "count": COUNTS, "position": POSITIONS, "size": SIZES,
          "background": BG_NAMES}
_POSITION_WORDS = {phrase.split()[-1]: pos for pos, phrases in POSITION_PHRASES.items() for phrase in phrases}


def caption_labels(caption: str) -> dict[str, int]:
    """Index into LABELS[k] of each attribute the caption states, -1 where it says nothing (or "" = dropped)."""
    words = caption.split()
    out = {k: -1 for k in LABELS}
    shape_at = next((i for i, w in enumerate(words) if w in SHAPES or (w.endswith("s") and w[:-1] in SHAPES)), None)
    if shape_at is None:
        return out
    word = words[shape_at]
    out["shape"] = SHAPES.index(word if word in SHAPES else word[:-1])
    count = next((c for c, ws in COUNT_WORDS.items() if words[0] in ws), None)
    if count is not None:
        out["count"] = COUNTS.index(count)
    if shape_at >= 1 and words[shape_at - 1] in COLOUR_NAMES:
        out["colour"] = COLOUR_NAMES.index(words[shape_at - 1])
    if shape_at >= 2 and words[shape_at - 2] in SIZES:
        out["size"] = SIZES.index(words[shape_at - 2])
    for w in words[shape_at + 1:]:
        if w in _POSITION_WORDS:
            out["position"] = POSITIONS.index(_POSITION_WORDS[w])
    if "background" in words and words.index("background") >= 1 and words[words.index("background") - 1] in BG_NAMES:
        out["background"] = BG_NAMES.index(words[words.index("background") - 1])
    return out


# The 20 fixed prompts/seeds of the adherence check: every shape, colour, count and position appears.
def adherence_prompts() -> list[tuple[str, Attributes, int]]:
    out = []
    rng = np.random.default_rng(2024)
    for i in range(20):
        shape = SHAPES[i % 5]
        colour = [c for c in COLOUR_NAMES][(3 * i) % 8]
        count = COUNTS[i % 3]
        position = POSITIONS[(i // 5 + i) % 5]
        bgs = [b for b in BG_NAMES if b != colour]
        bg = bgs[int(rng.integers(len(bgs)))]
        a = Attributes(shape, colour, count, position, "large" if count == 1 else "small", bg)
        words = [COUNT_WORDS[count][0], colour, shape + ("s" if count > 1 else ""),
                 POSITION_PHRASES[position][0], f"on a {bg} background"]
        out.append((" ".join(words), a, 100 + i))
    return out


if __name__ == "__main__":
    import sys
    from pathlib import Path
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/demo_samples")
    out.mkdir(parents=True, exist_ok=True)
    for i in range(16):
        img, cap, _ = sample(i)
        img.resize((256, 256), Image.Resampling.NEAREST).save(out / f"{i:02d}.png")
        print(i, cap)
