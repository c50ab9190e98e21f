// diffq's T5Tokenizer on a umt5-style tokenizer (WanPipeline's tokenizer is umt5-xxl's tokenizer.json through
// transformers' T5TokenizerFast): tests/fixtures/umt5/tokenizer is a small SentencePiece Unigram model trained
// with byte_fallback, its tokenizer.json laid out as umt5-xxl's (Replace " {2,}" normalizer, Metaspace
// pre-tokenizer, unk_id 3, byte_fallback true); tests/fixtures/umt5/tokenizer_ids.json holds transformers 5.24's
// ids on the corpus of tests/fixtures/tokenizers/corpus.json (tools/reference/make_umt5_fixtures.py).
// RealVocab runs only when DIFFQ_UMT5_TOKENIZER_DIR names the output of tools/reference/check_umt5_tokenizer.py.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "tokenizers/t5_tokenizer.h"

namespace fs = std::filesystem;
using diffq::tokenizers::T5Tokenizer;

namespace {

const fs::path kDir = fs::path(DIFFQ_SOURCE_DIR) / "tests/fixtures/umt5";

nlohmann::json read_json(const fs::path& p) {
  std::ifstream f(p);
  return nlohmann::json::parse(f);
}

// tokenizer(text).input_ids for every case; max_length padding/truncation checked on the way.
void expect_corpus(const T5Tokenizer& tok, const nlohmann::json& expected, const char* what) {
  const int64_t pad = expected["pad_id"].get<int64_t>(), eos = expected["eos_id"].get<int64_t>();
  size_t same = 0, n = 0, with_unknown = 0;
  for (const auto& c : expected["cases"]) {
    const std::string text = c["text"];
    const auto want = c["ids"].get<std::vector<int64_t>>();
    const auto got = tok.encode(text);
    ++n;
    same += got == want;
    with_unknown += std::find(want.begin(), want.end(), 2) != want.end();
    EXPECT_EQ(got, want) << what << " ids differ for " << nlohmann::json(text).dump();
    // padding="max_length", truncation=True, max_length 16: the first 15 ids, then eos, then pads.
    const auto e = tok(text, 16);
    std::vector<int64_t> padded(want.begin(), want.end() - 1);
    if (padded.size() > 15) padded.resize(15);
    padded.push_back(eos);
    std::vector<int64_t> mask(padded.size(), 1);
    padded.resize(16, pad);
    mask.resize(16, 0);
    EXPECT_EQ(e.input_ids, padded) << what << " padded ids differ for " << nlohmann::json(text).dump();
    EXPECT_EQ(e.attention_mask, mask) << what << " mask differs for " << nlohmann::json(text).dump();
  }
  std::printf("[%s] %zu/%zu prompts identical (%zu with unknown characters -> id 2)\n", what, same, n, with_unknown);
}

}  // namespace

TEST(UMT5Tokenizer, ByteFallbackModelMatchesTransformersOnCorpus) {
  const auto tok = T5Tokenizer::from_pretrained(kDir / "tokenizer");
  const nlohmann::json expected = read_json(kDir / "tokenizer_ids.json");
  EXPECT_EQ(tok.pad_token_id(), 0);
  EXPECT_EQ(tok.eos_token_id(), 1);
  // transformers' T5Tokenizer maps unknown characters to id 2 ("<s>" in umt5's layout), not to the file's
  // unk_id 3 and not to byte pieces <0xNN>.
  EXPECT_EQ(tok.unk_token_id(), 2);
  EXPECT_GE(tok.token_to_id("<0xF0>"), 0);
  ASSERT_GE(expected["cases"].size(), 200u);
  expect_corpus(tok, expected, "umt5-style");
}

TEST(UMT5Tokenizer, RealVocabIfAvailable) {
  const char* dir = std::getenv("DIFFQ_UMT5_TOKENIZER_DIR");
  if (!dir) GTEST_SKIP() << "set DIFFQ_UMT5_TOKENIZER_DIR (tools/reference/check_umt5_tokenizer.py)";
  const auto tok = T5Tokenizer::from_pretrained(fs::path(dir) / "tokenizer");
  EXPECT_EQ(tok.vocab_size(), 256300u);
  expect_corpus(tok, read_json(fs::path(dir) / "expected.json"), "umt5-xxl");
}
