"""Fixtures for the text side of WanPipeline (diffusers 0.42.1 pipelines/wan/pipeline_wan.py, transformers 5.24
models/umt5): tests/fixtures/umt5/.

- text_encoder/: a tiny random UMT5EncoderModel (vocab 32128 so the T5 tokenizer of tiny-flux/tokenizer_2 fits,
  d_model 8, 2 layers, 2 heads, every layer with its own relative_attention_bias), stored in float16.
- reference/umt5.safetensors: token ids + attention masks of prompts of different lengths (padded), and the
  encoder's last_hidden_state from transformers loaded in float32 and in bfloat16 (its own bf16 run), with the
  mask and without one.
- reference/wan_prompt.safetensors + wan_prompt.json: WanPipeline.encode_prompt (no CFG) with that encoder and
  tokenizer_2, prompts of different lengths (one longer than max_sequence_length, an empty one, one that
  prompt_clean changes), in float32 and bfloat16.
- prompt_clean.json: WanPipeline's prompt_clean (ftfy.fix_text -> html.unescape x2 -> strip -> \\s+ collapse) and
  ftfy.fix_text alone on a varied list.
- model_index.json: WanPipeline's text side only (text_encoder, tokenizer).
- tokenizer/: a small SentencePiece Unigram model trained with byte_fallback (umt5's special-token layout: pad 0,
  eos 1, bos 2, unk 3; identity normalization) and the tokenizer.json laid out as umt5-xxl's Hub file is
  (Replace " {2,}" normalizer, Metaspace pre-tokenizer, unk_id 3, byte_fallback true); tokenizer_ids.json: what
  transformers' T5TokenizerFast.from_pretrained(that folder) gives on tests/fixtures/tokenizers/corpus.json.
  Note: transformers 5.24's T5Tokenizer keeps only the vocab, the Precompiled charsmap and the template from a
  tokenizer.json; it rebuilds the rest (Unigram with unk_id=2 and byte_fallback=False, WhitespaceSplit +
  Metaspace), which is what these ids record.

Run: cd tools/reference && CUDA_VISIBLE_DEVICES= HF_HUB_OFFLINE=1 ../.venv/bin/python make_umt5_fixtures.py
Needs ftfy (requirements.txt).
"""
from __future__ import annotations

import io
import json
from pathlib import Path

from _common import FIXTURES, deterministic, fresh_dir, save_tensors, write_json

OUT = FIXTURES / "umt5"
T5_TOKENIZER = FIXTURES / "tiny-flux" / "tokenizer_2"
CORPUS = FIXTURES / "tokenizers" / "corpus.json"

ENCODER_PROMPTS = [
    "a photo of a cat",
    "A cat and a dog baking a cake together in a kitchen, the cat is measuring flour",
    "",
    "东京 at night, 🐱 sleeping",
]
ENCODER_MAX = 24

WAN_PROMPTS = [
    "A cat and a dog baking a cake together in a kitchen. The cat is carefully measuring flour, while the dog "
    "is stirring the batter with a wooden spoon. The kitchen is cozy, with sunlight streaming through.",
    "a photo of a cat",
    "",
    "  Tom &amp;amp; Jerry\u2019s \u201cﬁne\u201d   ｃａｔ\r\n\tat&nbsp;noon  ",
]
WAN_MAX = 32

CLEAN_CASES = [
    "", " ", "   \t\n  ", "a photo of a cat", "  leading and trailing  ", "multiple     spaces\tand\ttabs",
    "line\r\nbreaks\rand\nnewlines\u2028sep\u2029para\u0085nel", "nbsp\u00a0here and\u3000ideographic\u2003em",
    "zero\u200bwidth\u200cnon\u200djoiner\ufeffbom\u2060wj", "emoji 🐱🐶🎉 👨\u200d👩\u200d👧 🇫🇷 👍🏽 ❤️",
    "東京タワーの夜景、油絵 一只猫坐在红色椅子上 한국어", "Tom &amp; Jerry", "Tom &amp;amp; Jerry", "&amp;amp;amp;",
    "&lt;b&gt;bold&lt;/b&gt;", "<b>bold</b> &amp; &lt;", "&quot;quoted&quot; &#39;single&#39; &#x27;hex&#x27;",
    "&eacute;t&eacute; &Eacute;T&Eacute; &EACUTE; &copy &copy; &amp &ampx &notit; &notin;", "&#65;&#x42;&#X43; &#0; &#128; &#150; &#x110000; &#xD800;",
    "caf&eacute&nbsp;ok", "\u201ccurly double\u201d \u2018curly single\u2019 \u201elow\u201f \u201bx\u02bcy",
    "ﬁne ﬂow oﬀ ﬃ ﬄ ﬅ ﬆ Ĳ ĳ ŉ Ǆ ǅ ǆ Ǉ ǈ ǉ Ǌ ǋ ǌ Ǳ ǲ ǳ", "ｆｕｌｌｗｉｄｔｈ ＡＢＣ１２３！？ ｶﾀｶﾅ ￥￦",
    "control\x00\x01\x07\x08chars\x0b\x0c\x0e\x1b[31mred\x1b[0m\x7f del", "c1 \x80 \x85 \x91quote\x92 \x96 \x9f end",
    "NFC: cafe\u0301 A\u030a n\u0303", "decomposed Hangul \u1100\u1161\u11a8", "tags \U000e0041\U000e0042 \ufff9x\ufffb",
    "math ∑ ∫ √ ∞ ≠ ≤ ½ ² ① Ⅻ", "arrows → ⇒ — – … ‘’", "mojibake Ã©tÃ© cafÃ©", "more mojibake â€œquotedâ€\x9d",
    "tab\tinside\x1cfs\x1dgs\x1ers\x1fus", "\u00a0\u00a0nbsp padded\u00a0\u00a0", "A&B <tag> 5 < 6 &amp; 7 > 3",
    "line one\nline &amp; two <x>\nline &amp; three", "Привет, мир! ΣΊΣΥΦΟΣ مرحبا שלום", "İstanbul ß ẞ ﬅ",
]


def tiny_umt5():
    import torch
    from transformers import UMT5Config, UMT5EncoderModel

    cfg = UMT5Config(vocab_size=32128, d_model=8, d_kv=4, d_ff=16, num_layers=2, num_heads=2,
                     relative_attention_num_buckets=32, relative_attention_max_distance=128,
                     feed_forward_proj="gated-gelu", dropout_rate=0.0, is_encoder_decoder=False, use_cache=False)
    m = UMT5EncoderModel(cfg).eval()
    with torch.no_grad():
        # Larger position biases than the init gives, so every layer's own table visibly matters.
        for blk in m.encoder.block:
            blk.layer[0].SelfAttention.relative_attention_bias.weight.normal_(0.0, 2.0)
    return m


def encoder_fixture(out: Path) -> None:
    import torch
    from transformers import T5TokenizerFast, UMT5EncoderModel

    tiny_umt5().to(torch.float16).save_pretrained(out / "text_encoder", safe_serialization=True)
    tok = T5TokenizerFast.from_pretrained(T5_TOKENIZER)
    enc = tok(ENCODER_PROMPTS, padding="max_length", max_length=ENCODER_MAX, truncation=True,
              return_attention_mask=True, return_tensors="pt")
    ids, mask = enc.input_ids, enc.attention_mask
    assert len(set(mask.sum(1).tolist())) == len(ENCODER_PROMPTS), "prompts must have different lengths"
    t = {"input_ids": ids, "attention_mask": mask}
    for name, dt in (("f32", torch.float32), ("bf16", torch.bfloat16)):
        m = UMT5EncoderModel.from_pretrained(out / "text_encoder", dtype=dt).eval()
        with torch.no_grad():
            t[f"masked_{name}"] = m(ids, attention_mask=mask).last_hidden_state
            t[f"unmasked_{name}"] = m(ids).last_hidden_state
    save_tensors(out / "reference" / "umt5.safetensors", t)


def wan_fixture(out: Path) -> None:
    import torch
    from diffusers import WanPipeline
    from diffusers.pipelines.wan.pipeline_wan import prompt_clean
    from transformers import T5TokenizerFast, UMT5EncoderModel

    tok = T5TokenizerFast.from_pretrained(T5_TOKENIZER)
    t = {}
    cleaned = [prompt_clean(p) for p in WAN_PROMPTS]
    lengths = [len(tok(c).input_ids) for c in cleaned]
    assert max(lengths) > WAN_MAX and "" in cleaned
    for name, dt in (("f32", torch.float32), ("bf16", torch.bfloat16)):
        enc = UMT5EncoderModel.from_pretrained(out / "text_encoder", dtype=dt).eval()
        pipe = WanPipeline(tokenizer=tok, text_encoder=enc, vae=None, scheduler=None)
        with torch.no_grad():
            emb, neg = pipe.encode_prompt(WAN_PROMPTS, do_classifier_free_guidance=False,
                                          max_sequence_length=WAN_MAX, device=torch.device("cpu"), dtype=dt)
        assert neg is None and emb.dtype == dt
        t[f"prompt_embeds_{name}"] = emb
    save_tensors(out / "reference" / "wan_prompt.safetensors", t)
    write_json(out / "reference" / "wan_prompt.json",
               {"prompts": WAN_PROMPTS, "cleaned": cleaned, "max_sequence_length": WAN_MAX,
                "token_lengths": lengths})


def clean_fixture(out: Path) -> None:
    import ftfy
    from diffusers.pipelines.wan.pipeline_wan import prompt_clean

    import ftfy.bad_codecs  # noqa: F401  (sloppy-* codecs)

    corpus = [c["text"] for c in json.loads(CORPUS.read_text())["cases"]]
    # Mojibake: UTF-8 text decoded with the single-byte codecs ftfy repairs (and some it cannot).
    accented = [t for t in corpus if any(ord(ch) > 127 for ch in t)][:24]
    mojibake = []
    for i, t in enumerate(accented):
        enc = ["latin-1", "sloppy-windows-1252", "sloppy-windows-1251", "macroman", "cp437", "iso-8859-2"][i % 6]
        mojibake.append(t.encode("utf-8").decode(enc, errors="replace"))
        mojibake.append("prefix " + t.encode("utf-8").decode("sloppy-windows-1252") + " and plain café")
    texts = CLEAN_CASES + mojibake + corpus
    write_json(out / "prompt_clean.json", {
        "ftfy_version": ftfy.__version__,
        # fix_encoding: whether ftfy's mojibake repair (fix_encoding) changes the result.
        "cases": [{"text": s, "fix_text": ftfy.fix_text(s), "prompt_clean": prompt_clean(s),
                   "fix_encoding": ftfy.fix_text(s) != ftfy.fix_text(s, fix_encoding=False)} for s in texts],
    })


def tokenizer_fixture(out: Path) -> None:
    import sentencepiece as spm
    from transformers import T5TokenizerFast

    corpus = [c["text"] for c in json.loads(CORPUS.read_text())["cases"]]
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter([t for t in corpus if t.strip()] * 3), model_writer=model, model_type="unigram",
        vocab_size=1000, hard_vocab_limit=False, byte_fallback=True, pad_id=0, eos_id=1, bos_id=2, unk_id=3,
        normalization_rule_name="identity", character_coverage=0.98, num_threads=1, minloglevel=2,
        shuffle_input_sentence=False)
    d = out / "tokenizer"
    d.mkdir(parents=True)
    (d / "spiece.model").write_bytes(model.getvalue())
    extra = 8
    cfg = {"tokenizer_class": "T5Tokenizer", "eos_token": "</s>", "pad_token": "<pad>", "unk_token": "<unk>",
           "extra_ids": extra, "additional_special_tokens": [f"<extra_id_{i}>" for i in range(extra)],
           "model_max_length": 512}
    write_json(d / "tokenizer_config.json", cfg)
    # transformers' own conversion of the spiece.model (its vocab, with the extra ids appended) ...
    from_spm = T5TokenizerFast.from_pretrained(d)
    conv = json.loads(from_spm.backend_tokenizer.to_str())
    # ... laid out as umt5-xxl's tokenizer.json is on the Hub (stable-diffusion.cpp embeds that file).
    hub = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": conv["added_tokens"],
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "}]},
        "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "add_prefix_space": True},
        "post_processor": conv["post_processor"],
        "decoder": {"type": "Metaspace", "replacement": "\u2581", "add_prefix_space": True},
        "model": {"type": "Unigram", "unk_id": 3, "vocab": conv["model"]["vocab"], "byte_fallback": True},
    }
    (d / "tokenizer.json").write_text(json.dumps(hub, ensure_ascii=False) + "\n")
    tok = T5TokenizerFast.from_pretrained(d)
    assert tok.unk_token_id == 3 and tok.pad_token_id == 0 and tok.eos_token_id == 1
    cases = []
    for text in corpus:
        ids = list(tok(text).input_ids)
        assert ids == list(from_spm(text).input_ids), f"spiece.model and tokenizer.json disagree on {text!r}"
        cases.append({"text": text, "ids": ids})
    n_unk = sum(2 in c["ids"] for c in cases)
    assert n_unk > 0, "the corpus should reach unknown characters"
    # One case per line (indent=2 would put every id on its own line: 2.3x the bytes).
    head = json.dumps({"pad_id": tok.pad_token_id, "eos_id": tok.eos_token_id, "vocab_size": len(tok)},
                      sort_keys=True)
    lines = ",\n".join(json.dumps(c, ensure_ascii=False, sort_keys=True, separators=(",", ":")) for c in cases)
    (out / "tokenizer_ids.json").write_text('{"cases": [\n' + lines + "\n], " + head[1:] + "\n")
    print(f"[umt5] tokenizer: {len(conv['model']['vocab'])} pieces, {n_unk} prompts with unknown characters")


def main() -> None:
    deterministic(0)
    out = fresh_dir(OUT)
    (out / "reference").mkdir()
    # A partial Wan folder (text side only) so DiffusersFolder can open it.
    write_json(out / "model_index.json", {"_class_name": "WanPipeline", "_diffusers_version": "0.42.1",
                                          "text_encoder": ["transformers", "UMT5EncoderModel"],
                                          "tokenizer": ["transformers", "T5TokenizerFast"]})
    encoder_fixture(out)
    wan_fixture(out)
    clean_fixture(out)
    tokenizer_fixture(out)
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(f"[umt5] fixtures -> {out} ({size / 1e6:.2f} MB)")


if __name__ == "__main__":
    main()
