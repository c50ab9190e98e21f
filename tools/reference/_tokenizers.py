"""The real CLIP and T5 tokenizers, rebuilt from files that PyPI packages ship (no Hub access).

CLIP (openai/clip-vit-large-patch14, FLUX tokenizer/): OpenAI's BPE merges `bpe_simple_vocab_16e6.txt.gz`
ship in the open_clip_torch wheel. vocab.json/merges.txt are rebuilt exactly as CLIP's own
SimpleTokenizer (and HF's CLIPTokenizer files) lay them out: 256 byte-unicode chars, the same with
</w>, one token per merge for the first 49152-256-2 merges, then <|startoftext|>, <|endoftext|>
(49408 tokens). Cross-check: the merges equal the copy stable-diffusion.cpp embeds.

T5 (google/t5-v1_1-xxl, FLUX tokenizer_2/): stable-diffusion.cpp embeds the T5TokenizerFast
tokenizer.json (Unigram, 32000 pieces + 100 <extra_id_N>) in src/tokenizers/vocab/clip_t5.hpp;
its sdist (stable-diffusion-cpp-python) is on PyPI. spiece.model is rebuilt from it as a SentencePiece
ModelProto (same pieces, scores, types and the nmt_nfkc precompiled charsmap) and checked against the
tokenizer.json on sample prompts with the sentencepiece library itself.
"""
from __future__ import annotations

import base64
import gzip
import json
import re
import tarfile
import zipfile

from _common import CACHE, fetch_pypi_file

OPEN_CLIP = ("open_clip_torch==3.3.0", "open_clip_torch-3.3.0-py3-none-any.whl",
             "c549ad5ed6bfc119cc11105033c0a2b9d7a2a4afeb40a58a09aab3da1a0043ce", ("--only-binary=:all:",))
SDCPP = ("stable-diffusion-cpp-python==0.4.7", "stable_diffusion_cpp_python-0.4.7.tar.gz",
         "998d1957260dd5ae4e18a8acc0c14b0a8757aaa9f96515197b6d5bbf46df9282", ("--no-binary=:all:",))
SDCPP_VOCAB = "stable_diffusion_cpp_python-0.4.7/vendor/stable-diffusion.cpp/src/tokenizers/vocab/clip_t5.hpp"

SAMPLE_PROMPTS = [
    "a photo of a cat",
    "A photo of a Cat sitting on a RED chair, 4k!!",
    "Hello World! It's a 2-step test, naïve café — 東京 🐱 <|endoftext|> done.",
    "   spaces    and\ttabs\nnew lines   ",
    "",
    "a cat sipping a margarita, extra_id <extra_id_0> x</s>y",
]


def bytes_to_unicode() -> dict[int, str]:
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


def clip_vocab_and_merges() -> tuple[dict[str, int], list[str]]:
    whl = fetch_pypi_file(*OPEN_CLIP)
    with zipfile.ZipFile(whl) as z:
        text = gzip.decompress(z.read("open_clip/bpe_simple_vocab_16e6.txt.gz")).decode("utf-8")
    merges = text.split("\n")[1:49152 - 256 - 2 + 1]
    assert len(merges) == 48894
    units = list(bytes_to_unicode().values())
    tokens = units + [u + "</w>" for u in units] + ["".join(m.split()) for m in merges] + \
        ["<|startoftext|>", "<|endoftext|>"]
    assert len(tokens) == 49408 and len(set(tokens)) == 49408
    vocab = {t: i for i, t in enumerate(tokens)}
    # Independent cross-check against stable-diffusion.cpp's embedded copy of merges.txt.
    sd = _sdcpp_arrays()["clip_merges_utf8_c_str"].decode("utf-8")
    assert sd == merges_txt(merges), "open_clip merges != stable-diffusion.cpp merges"
    return vocab, merges


def merges_txt(merges: list[str]) -> str:
    return "#version: 0.2\n" + "\n".join(merges) + "\n"


def vocab_json(vocab: dict[str, int]) -> str:
    # HF's CLIPTokenizer.save_vocabulary layout: one JSON object, ensure_ascii=False, id order.
    return json.dumps(dict(sorted(vocab.items(), key=lambda kv: kv[1])), ensure_ascii=False) + "\n"


_ARRAYS: dict[str, bytes] | None = None


def _sdcpp_arrays() -> dict[str, bytes]:
    global _ARRAYS
    if _ARRAYS is None:
        cached = CACHE / "sdcpp_clip_t5.json"
        tgz = fetch_pypi_file(*SDCPP)
        if not cached.exists():
            with tarfile.open(tgz) as t:
                src = t.extractfile(SDCPP_VOCAB).read().decode("ascii")
            arrays = {}
            for m in re.finditer(r"static const unsigned char (\w+)\[\] = \{(.*?)\};", src, re.S):
                hexes = re.findall(r"0x([0-9a-fA-F]{2})", m.group(2))
                arrays[m.group(1)] = bytes(int(h, 16) for h in hexes).decode("latin-1")
            cached.write_text(json.dumps(arrays))
        _ARRAYS = {k: v.encode("latin-1") for k, v in json.loads(cached.read_text()).items()}
    return _ARRAYS


def t5_tokenizer_json() -> bytes:
    """The T5 v1.1 tokenizer.json exactly as stable-diffusion.cpp embeds it (the Hub file's bytes)."""
    return _sdcpp_arrays()["t5_tokenizer_json_str"]


def t5_spiece_model(tokenizer_json: bytes) -> bytes:
    """A SentencePiece ModelProto equivalent to the Unigram tokenizer.json (32000 pieces; the 100
    <extra_id_N> are added by T5Tokenizer, not stored in spiece.model)."""
    from sentencepiece import sentencepiece_model_pb2 as pb

    j = json.loads(tokenizer_json)
    model = j["model"]
    assert model["type"] == "Unigram" and model["unk_id"] == 2
    norms = j["normalizer"]["normalizers"]
    charsmap = base64.b64decode(next(n for n in norms if n["type"] == "Precompiled")["precompiled_charsmap"])
    m = pb.ModelProto()
    ts = m.trainer_spec
    ts.model_type = pb.TrainerSpec.UNIGRAM
    ts.vocab_size = 32000
    ts.unk_id, ts.eos_id, ts.pad_id, ts.bos_id = 2, 1, 0, -1
    ts.unk_piece, ts.eos_piece, ts.pad_piece = "<unk>", "</s>", "<pad>"
    ts.byte_fallback = False
    ns = m.normalizer_spec
    ns.name = "nmt_nfkc"
    ns.precompiled_charsmap = charsmap
    ns.add_dummy_prefix = True
    ns.remove_extra_whitespaces = True
    ns.escape_whitespaces = True
    for i, (piece, score) in enumerate(model["vocab"][:32000]):
        p = m.pieces.add()
        p.piece = piece
        p.score = score
        if i == 2:
            p.type = pb.ModelProto.SentencePiece.UNKNOWN
        elif i < 2:
            p.type = pb.ModelProto.SentencePiece.CONTROL
        else:
            p.type = pb.ModelProto.SentencePiece.NORMAL
    return m.SerializeToString(deterministic=True)


def check_t5_spiece(spiece_path, tokenizer_json_path) -> None:
    """sentencepiece(spiece.model) must give the same ids as the tokenizer.json (which appends </s>)."""
    import sentencepiece as spm
    import tokenizers

    sp = spm.SentencePieceProcessor(model_file=str(spiece_path))
    tk = tokenizers.Tokenizer.from_file(str(tokenizer_json_path))
    for p in SAMPLE_PROMPTS:
        if "<extra_id" in p or "</s>" in p:
            continue  # special tokens are matched only by the HF tokenizer, not by raw sentencepiece
        a = sp.encode(p) + [1]
        b = tk.encode(p).ids
        if p != p.rstrip():
            # Known difference of the real pair too: the fast tokenizer keeps a trailing "▁" (id 3) for
            # trailing whitespace; sentencepiece's remove_extra_whitespaces drops it. Flux uses the fast one.
            assert b == a[:-1] + [3, 1], f"unexpected trailing-space behaviour on {p!r}: {a} vs {b}"
            continue
        assert a == b, f"spiece.model and tokenizer.json disagree on {p!r}: {a} vs {b}"
