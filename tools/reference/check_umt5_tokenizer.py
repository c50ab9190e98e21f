"""Developer-only check (no committed fixture: the file is 9 MB): diffq's T5Tokenizer on umt5-xxl's real
tokenizer.json (WanPipeline's tokenizer, 256300 pieces) against transformers' T5TokenizerFast.

stable-diffusion.cpp embeds the umt5-xxl tokenizer.json in src/tokenizers/vocab/umt5.hpp; its sdist
(stable-diffusion-cpp-python 0.4.7, PyPI) carries it. This script writes, under OUT (default
/tmp/diffq-umt5-xxl-tokenizer):
  tokenizer/tokenizer.json        the embedded file, byte for byte
  tokenizer/tokenizer_config.json umt5-xxl's settings (T5Tokenizer, 300 extra ids, pad/eos/unk)
  expected.json                   transformers' ids for tests/fixtures/tokenizers/corpus.json and a few more prompts
Then run:  DIFFQ_UMT5_TOKENIZER_DIR=OUT ./build/bin/test_pipelines --gtest_filter='UMT5Tokenizer.RealVocab*'

Run: cd tools/reference && HF_HUB_OFFLINE=1 ../.venv/bin/python check_umt5_tokenizer.py [OUT]
"""
from __future__ import annotations

import json
import re
import sys
import tarfile
from pathlib import Path

from _common import FIXTURES, fetch_pypi_file
from _tokenizers import SDCPP

UMT5_HPP = "stable_diffusion_cpp_python-0.4.7/vendor/stable-diffusion.cpp/src/tokenizers/vocab/umt5.hpp"
EXTRA = ["Ein Hund läuft über die Wiese", "un chat qui dort sur un canapé rouge", "猫が窓辺で眠っている",
         "кошка спит на диване", "𓀀 𒀀 ꙮ \U0001FAE8 \u0378 unknown characters", "a  b\tc\nd  e", "<extra_id_299> x",
         "A cat and a dog baking a cake together in a kitchen. " * 30]


def umt5_tokenizer_json() -> bytes:
    tgz = fetch_pypi_file(*SDCPP)
    with tarfile.open(tgz) as t:
        src = t.extractfile(UMT5_HPP).read().decode("ascii")
    m = re.search(r"static const unsigned char umt5_tokenizer_json_str\[\] = \{(.*?)\};", src, re.S)
    return bytes(int(h, 16) for h in re.findall(r"0x([0-9a-fA-F]{2})", m.group(1)))


def main() -> None:
    from transformers import T5TokenizerFast

    out = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/diffq-umt5-xxl-tokenizer")
    tok_dir = out / "tokenizer"
    tok_dir.mkdir(parents=True, exist_ok=True)
    raw = umt5_tokenizer_json()
    j = json.loads(raw)
    assert j["model"]["type"] == "Unigram" and len(j["model"]["vocab"]) == 256300
    (tok_dir / "tokenizer.json").write_bytes(raw)
    cfg = {"tokenizer_class": "T5Tokenizer", "eos_token": "</s>", "pad_token": "<pad>", "unk_token": "<unk>",
           "extra_ids": 300, "additional_special_tokens": [f"<extra_id_{i}>" for i in range(300)],
           "model_max_length": 512}
    (tok_dir / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    tok = T5TokenizerFast.from_pretrained(tok_dir)
    texts = [c["text"] for c in json.loads((FIXTURES / "tokenizers" / "corpus.json").read_text())["cases"]] + EXTRA
    cases = [{"text": t, "ids": list(tok(t).input_ids)} for t in texts]
    (out / "expected.json").write_text(json.dumps({"pad_id": tok.pad_token_id, "eos_id": tok.eos_token_id,
                                                   "cases": cases}, ensure_ascii=False))
    n_unk = sum(2 in c["ids"] for c in cases)
    print(f"umt5-xxl: {len(j['model']['vocab'])} pieces, normalizer {json.dumps(j['normalizer'])}, "
          f"pre_tokenizer {j['pre_tokenizer']['type']}, byte_fallback {j['model'].get('byte_fallback')}, "
          f"unk_id {j['model']['unk_id']}; {len(cases)} prompts ({n_unk} with id 2 for unknown characters) -> {out}")


if __name__ == "__main__":
    main()
