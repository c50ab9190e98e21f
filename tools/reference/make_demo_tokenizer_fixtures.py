"""Token ids that transformers' CLIPTokenizer and T5TokenizerFast give with the demo model's own tokenizers
(models/demo-flux/tokenizer{,_2}, built by tools/train_demo/build_text.py) on 50 demo captions and some
out-of-vocabulary text. Checked by tests/pipelines/test_demo_tokenizers.cpp.

Writes tests/fixtures/demo-tokenizers/ids.json: [{text, clip, t5}] (unpadded input_ids as transformers
returns them with add_special_tokens) + the padded FluxPipeline calls for the first entries.
"""
from __future__ import annotations

import sys
from pathlib import Path

from _common import FIXTURES, ROOT, deterministic, fresh_dir, write_json

sys.path.insert(0, str(ROOT / "tools" / "train_demo"))
import dataset as D  # noqa: E402

OOV = [
    "a photo of a Cat sitting on a RED chair, 4k!!",
    "Two BLUE Stars at the TOP",
    "a magenta hexagon next to a zebra",
    "naïve café — 東京 🐱 <|endoftext|> done </s> x<pad>y",
    "   spaces    and\ttabs\nnew lines   ",
    "",
    "circles,squares;triangles... (stars) & rings?",
    "one1 two2 3three",
]


def main() -> None:
    deterministic(0)
    from transformers import CLIPTokenizer, T5TokenizerFast

    model = ROOT / "models" / "demo-flux"
    clip = CLIPTokenizer.from_pretrained(str(model / "tokenizer"))
    t5 = T5TokenizerFast.from_pretrained(str(model / "tokenizer_2"))
    _, caps, _ = D.make_arrays(50, seed=12345)
    entries = []
    for text in caps + OOV:
        entries.append(dict(text=text, clip=clip(text).input_ids, t5=t5(text).input_ids))
    padded = []
    for text in caps[:3] + OOV[:2]:
        padded.append(dict(
            text=text,
            clip=clip(text, padding="max_length", max_length=77, truncation=True).input_ids,
            t5_32=t5(text, padding="max_length", max_length=32, truncation=True).input_ids,
            t5_8=t5(text, padding="max_length", max_length=8, truncation=True).input_ids))
    out = fresh_dir(FIXTURES / "demo-tokenizers")
    write_json(out / "ids.json", dict(entries=entries, padded=padded,
                                      clip_vocab_size=len(clip), t5_vocab_size=len(t5)))
    print(f"wrote {out / 'ids.json'} ({len(entries)} texts)")


if __name__ == "__main__":
    main()
