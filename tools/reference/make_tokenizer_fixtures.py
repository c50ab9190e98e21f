"""Token ids from transformers' CLIPTokenizer and T5TokenizerFast (tokenizers-backed, transformers 5) for a
deterministic corpus of prompts, loaded from tests/fixtures/tiny-flux/tokenizer and tokenizer_2.

Writes tests/fixtures/tokenizers/corpus.json: {"cases": [...], "clip": {...}, "t5": {...}} where each case
holds the prompt `text` and
  clip_ids / t5_ids: tokenizer(text).input_ids (special tokens added, no padding, no truncation);
  clip_max / t5_max: what FluxPipeline gets with padding="max_length", max_length=77 / 512,
                     truncation=True, stored without the trailing padding: the ids up to the attention
                     mask's end (the rest is checked here to be `pad_id` up to `max_length`).
tests/pipelines/test_tokenizers.cpp compares diffq's tokenizers with every case.
"""
from __future__ import annotations

import random

from _common import FIXTURES, deterministic, fresh_dir, write_json

TOK_DIR = FIXTURES / "tiny-flux"
OUT = FIXTURES / "tokenizers"

HAND = [
    "", " ", "   ", "\t", "\n", " \t\n ", "a", "A", "a photo of a cat", "A photo of a Cat sitting on a RED chair, 4k!!",
    "x   ", "   leading spaces", "trailing spaces   ", "tabs\tbetween\twords", "new\nlines\r\nhere",
    "multiple     spaces    inside", "MiXeD CaSe WoRdS", "ALL CAPS SHOUTING", "it's they're we've I'm you'll he'd",
    "IT'S THEY'RE", "don't won't can't", "'s 't 're", "rock'n'roll", "''quoted''", "\"double quoted\"",
    "café naïve résumé façade", "Ångström Øre Æsir straße", "cafe\u0301 (decomposed e + acute)",
    "ÉCOLE ÇA Ü", "İstanbul ıi", "ΣΊΣΥΦΟΣ ὀδυσσεύς", "Привет, мир! ЁЖ", "مرحبا بالعالم", "שלום עולם",
    "こんにちは世界", "東京タワーの夜景、油絵", "一只猫坐在红色椅子上", "한국어 문장 테스트", "ｆｕｌｌｗｉｄｔｈ　ＡＢＣ１２３",
    "ﬁ ﬂ ligatures ﬀ", "① ② ③ Ⅻ ½ ¾ ²³", "x² + y² = z²", "emoji 🐱🐶🎉", "family 👨‍👩‍👧‍👦 flag 🇫🇷",
    "skin 👍🏽 heart ❤️", "🙂🙂🙂", "math ∑ ∫ √ ∞ ≠ ≤", "arrows → ← ↑ ↓ ⇒", "currency $5 €10 £3 ¥100 ₹50",
    "1234567890", "3.14159 2.71828", "1,000,000 people", "year 2024-05-17 at 12:34:56", "0x1F 0b1010 1e-5",
    "!!!???...", "...", "---===+++", "#hashtag @mention", "a_b_c snake_case", "camelCaseWords", "URL http://ex.com/a?b=c&d=e",
    "email test@example.com", "&amp; &lt; &gt; &quot; &#39; &nbsp;", "<b>bold</b> <i>it</i>", "<|endoftext|>",
    "<|startoftext|>", "a <|endoftext|>b", "<|startoftext|>hello<|endoftext|>", "<|ENDOFTEXT|>", "<|endoftext",
    "</s>", "<pad>", "<unk>", "hello </s> world", "<extra_id_0> mask <extra_id_99>", "</s></s>", "<s>",
    "non\u00a0breaking\u00a0space", "zero\u200bwidth\u200bspace", "ideographic\u3000space", "em\u2003space en\u2002space",
    "soft\u00adhyphen", "control\u0007bell\u001bescape", "bom\ufeffmark", "line\u2028separator", "nel\u0085char",
    "\u2581already metaspace", "a\u2581\u2581b", "▁", "tilde ~ backtick ` caret ^", "pipes | and \\ backslash",
    "curly ‘quotes’ “double”", "dashes – — ‐", "ellipsis … bullet • middot ·", "« guillemets » ‹ › ",
    "Zürich, München, Köln", "Ça va? Très bien!", "ñandú pingüino", "Þórr Ðóra", "œuvre Œdipe",
    "vietnamese: Tiếng Việt có dấu", "thai: ภาษาไทย", "hindi: हिन्दी भाषा", "tamil: தமிழ்", "a\u0308\u0301 stacked marks",
    "Z̤͔ͧ̑̓ä͖̭̈̇lͮ̒ͫǧ̗͚̚o̙̔ͮ̇͐̇", "\u0301leading combining", "keycap 1️⃣ #️⃣", "variation ︎ selectors",
    "a" * 300, "ab " * 40, "hello" + "!" * 50, "🎉" * 30,
]

WORDS = ("a photo of cat dog red blue green portrait landscape painting oil canvas detailed 4k 8k ultra "
         "realistic cinematic lighting sunset mountain river forest castle dragon knight robot city night "
         "neon cyberpunk watercolor sketch anime style by artist trending on artstation masterpiece best "
         "quality highly intricate sharp focus bokeh 35mm f/1.8 HDR volumetric fog golden hour").split()
EXTRA = ["café", "naïve", "東京", "猫", "🐱", "🚀", "Ünïcödé", "ДОМ", "ß", "!!", "?", "...", ",", "(", ")", "[", "]",
         "{", "}", ":", ";", "'s", "n't", "&amp;", "<br>", "\t", "\n", "  ", "42", "3.5", "1/2", "100%", "#1",
         "e\u0301", "ﬁ", "①", "x²", "\u00a0", "\u3000", "Ｗ", "İ", "Σ", "ǅ", "‐", "–", "\u2581", "</s>",
         "<|endoftext|>"]


def random_prompts(rng: random.Random, n: int) -> list[str]:
    out = []
    for i in range(n):
        k = rng.randint(1, 25)
        parts = []
        for _ in range(k):
            r = rng.random()
            if r < 0.7:
                w = rng.choice(WORDS)
                c = rng.random()
                w = w.upper() if c < 0.1 else w.capitalize() if c < 0.25 else w
            else:
                w = rng.choice(EXTRA)
            parts.append(w)
        seps = [rng.choice([" ", " ", " ", "", ", ", "  ", "\t", " \n"]) for _ in parts]
        out.append("".join(p + s for p, s in zip(parts, seps)).rstrip(" ") if i % 3 else
                   "".join(p + s for p, s in zip(parts, seps)))
    return out


def long_prompts(rng: random.Random) -> list[str]:
    out = []
    for n in (60, 80, 120, 400, 700):
        out.append(" ".join(rng.choice(WORDS + EXTRA[:8]) for _ in range(n)))
    out.append(", ".join(f"item {i}" for i in range(300)))
    out.append("東京の夜景" * 150)
    return out


def encode_max(tok, text: str, max_length: int, pad_id: int) -> list[int]:
    enc = tok(text, padding="max_length", max_length=max_length, truncation=True)
    ids, mask = list(enc.input_ids), list(enc.attention_mask)
    assert len(ids) == max_length, (text, len(ids))
    n = sum(mask)
    assert mask == [1] * n + [0] * (max_length - n)
    assert ids[n:] == [pad_id] * (max_length - n)
    return ids[:n]


def main() -> None:
    deterministic(0)
    from transformers import CLIPTokenizer, T5TokenizerFast

    clip = CLIPTokenizer.from_pretrained(TOK_DIR / "tokenizer")
    t5 = T5TokenizerFast.from_pretrained(TOK_DIR / "tokenizer_2")
    rng = random.Random(1234)
    prompts = HAND + random_prompts(rng, 130) + long_prompts(rng)
    cases = []
    for text in prompts:
        cases.append({
            "text": text,
            "clip_ids": list(clip(text).input_ids),
            "t5_ids": list(t5(text).input_ids),
            "clip_max": encode_max(clip, text, 77, clip.pad_token_id),
            "t5_max": encode_max(t5, text, 512, t5.pad_token_id),
        })
    assert any(len(c["clip_ids"]) > 77 for c in cases) and any(len(c["t5_ids"]) > 512 for c in cases)
    out = fresh_dir(OUT)
    write_json(out / "corpus.json", {
        "clip": {"max_length": 77, "pad_id": clip.pad_token_id, "bos_id": clip.bos_token_id,
                 "eos_id": clip.eos_token_id},
        "t5": {"max_length": 512, "pad_id": t5.pad_token_id, "eos_id": t5.eos_token_id},
        "cases": cases,
    })
    print(f"[tokenizers] {len(cases)} prompts -> {out / 'corpus.json'} "
          f"({(out / 'corpus.json').stat().st_size / 1e6:.2f} MB)")


if __name__ == "__main__":
    main()
