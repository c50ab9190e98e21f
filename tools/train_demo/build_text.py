"""Step 1: the demo's own tokenizers and (frozen, random, seeded) text encoders.

Writes WORK/text/{tokenizer,tokenizer_2,text_encoder,text_encoder_2}:
  tokenizer/      CLIP byte-level BPE: vocab.json + merges.txt. The vocabulary is CLIP's layout (256 byte
                  characters, the same with "</w>", one token per merge, <|startoftext|>, <|endoftext|>), the
                  merges are learnt here by plain BPE over the demo grammar's words until every word is one
                  token; any other text still tokenizes through the byte alphabet.
  tokenizer_2/    T5: a SentencePiece Unigram spiece.model trained on the captions (pad 0, eos 1, unk 2 as
                  T5's), loaded by transformers' T5Tokenizer (no <extra_id_N>) and saved (tokenizer.json).
  text_encoder/   CLIPTextModel, text_encoder_2/ T5EncoderModel: tiny, random init from fixed seeds (issue 22
                  allows frozen random encoders: token identity survives the residual stream).
"""
from __future__ import annotations

import collections
import io
import json
import shutil

import common as C
import dataset as D


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


def learn_merges(words: dict[str, int]) -> list[tuple[str, str]]:
    """Plain BPE (most frequent pair first, ties by the pair's text) until every word is one symbol."""
    seqs = {w: list(w[:-1]) + [w[-1] + "</w>"] for w in words}
    merges = []
    while any(len(s) > 1 for s in seqs.values()):
        counts = collections.Counter()
        for w, s in seqs.items():
            for a, b in zip(s, s[1:]):
                counts[(a, b)] += words[w]
        best = min(counts, key=lambda p: (-counts[p], p))
        merges.append(best)
        for w, s in seqs.items():
            out, i = [], 0
            while i < len(s):
                if i + 1 < len(s) and (s[i], s[i + 1]) == best:
                    out.append(s[i] + s[i + 1])
                    i += 2
                else:
                    out.append(s[i])
                    i += 1
            seqs[w] = out
    return merges


def build_clip_tokenizer(out):
    from transformers import CLIPTokenizer
    caps = D.legacy_captions(2000, seed=C.SEED + 100)  # session 13's captions: the same merges as shipped
    freq = collections.Counter(w for c in caps for w in c.split())
    for w in D.vocabulary():
        freq[w] += 1
    merges = learn_merges(dict(freq))
    units = list(bytes_to_unicode().values())
    tokens = units + [u + "</w>" for u in units] + [a + b for a, b in merges] + ["<|startoftext|>", "<|endoftext|>"]
    assert len(set(tokens)) == len(tokens)
    vocab = {t: i for i, t in enumerate(tokens)}
    out.mkdir(parents=True)
    (out / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False) + "\n")
    (out / "merges.txt").write_text("#version: 0.2\n" + "\n".join(f"{a} {b}" for a, b in merges) + "\n")
    tok = CLIPTokenizer.from_pretrained(str(out), model_max_length=77)
    tok.save_pretrained(str(out))  # tokenizer_config.json (model_max_length 77, special tokens)
    (out / "tokenizer.json").unlink(missing_ok=True)  # keep the Hub layout: vocab.json + merges.txt
    for w in D.vocabulary():
        ids = tok(w).input_ids
        assert len(ids) == 3, (w, ids)
    return tok


# So that capitals, digits and punctuation get pieces of their own instead of <unk>.
EXTRA_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ 0123456789 . , ! ? ' - : ; ( )"


def build_t5_tokenizer(out):
    import sentencepiece as spm
    from transformers import T5Tokenizer
    caps = D.legacy_captions(5000, seed=C.SEED + 200)
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(caps + D.vocabulary() + [EXTRA_CHARS]), model_writer=model, model_type="unigram", vocab_size=256,
        character_coverage=1.0, pad_id=0, eos_id=1, unk_id=2, bos_id=-1, pad_piece="<pad>", eos_piece="</s>",
        unk_piece="<unk>", normalization_rule_name="nmt_nfkc", hard_vocab_limit=False, num_threads=1,
        minloglevel=2)
    stage = out.parent / "t5_stage"
    stage.mkdir(parents=True)
    (stage / "spiece.model").write_bytes(model.getvalue())
    tok = T5Tokenizer.from_pretrained(str(stage), extra_ids=0, model_max_length=512)
    tok.save_pretrained(str(out))
    (out / "spiece.model").write_bytes(model.getvalue())
    shutil.rmtree(stage)
    sp = spm.SentencePieceProcessor(model_proto=model.getvalue())
    for c in caps[:200]:
        assert tok(c).input_ids == sp.encode(c) + [1], c
    for w in D.vocabulary():  # every word of the grammar is one piece, except "background" (the trainer splits it)
        if w == "background":
            continue
        assert len(tok(w).input_ids) == 2, (w, tok(w).input_ids)
    return tok


def copy_tokenizers(src, out):
    """The tokenizers of a pipeline folder (models/demo-flux), for a machine where building them fails (the T5
    tokenizer's conversion needs protobuf): the files build_text.py made there, loaded back."""
    from transformers import CLIPTokenizer, T5TokenizerFast
    from pathlib import Path
    src = Path(src)
    (out / "tokenizer").mkdir(parents=True)
    for f in ("vocab.json", "merges.txt", "tokenizer_config.json", "special_tokens_map.json"):
        if (src / "tokenizer" / f).is_file():
            shutil.copy(src / "tokenizer" / f, out / "tokenizer" / f)
    shutil.copytree(src / "tokenizer_2", out / "tokenizer_2")
    return (CLIPTokenizer.from_pretrained(str(out / "tokenizer"), model_max_length=77),
            T5TokenizerFast.from_pretrained(str(out / "tokenizer_2")))


def main():
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizers-from", default="", metavar="FOLDER",
                    help="copy tokenizer/ and tokenizer_2/ from this pipeline folder instead of learning them (they "
                         "are the same files: build_text.py re-makes the shipped ones byte for byte)")
    args = ap.parse_args()
    C.setup()
    import torch
    from transformers import CLIPTextConfig, CLIPTextModel, T5Config, T5EncoderModel
    out = C.WORK / "text"
    if out.exists():
        shutil.rmtree(out)
    if args.tokenizers_from:
        clip_tok, t5_tok = copy_tokenizers(args.tokenizers_from, out)
    else:
        clip_tok = build_clip_tokenizer(out / "tokenizer")
        t5_tok = build_t5_tokenizer(out / "tokenizer_2")
    print("CLIP vocab", len(clip_tok), " T5 vocab", len(t5_tok))
    torch.manual_seed(C.SEED + 1)
    clip = CLIPTextModel(CLIPTextConfig(vocab_size=len(clip_tok), bos_token_id=clip_tok.bos_token_id,
                                        eos_token_id=clip_tok.eos_token_id, pad_token_id=clip_tok.pad_token_id,
                                        **C.CLIP_CFG)).eval()
    torch.manual_seed(C.SEED + 2)
    t5 = T5EncoderModel(T5Config(vocab_size=len(t5_tok), **C.T5_CFG)).eval()
    clip.save_pretrained(str(out / "text_encoder"))
    t5.save_pretrained(str(out / "text_encoder_2"))
    print("text encoders:", sum(p.numel() for p in clip.parameters()), sum(p.numel() for p in t5.parameters()))


if __name__ == "__main__":
    main()
