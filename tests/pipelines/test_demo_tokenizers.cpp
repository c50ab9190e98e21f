// diffq's CLIP and T5 tokenizers loading the demo model's own tokenizers (models/demo-flux/tokenizer{,_2},
// a small BPE and a small SentencePiece Unigram built by tools/train_demo/build_text.py), against the ids that
// transformers' CLIPTokenizer / T5TokenizerFast wrote into tests/fixtures/demo-tokenizers/ids.json
// (tools/reference/make_demo_tokenizer_fixtures.py): 50 demo captions and out-of-vocabulary text.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include "tokenizers/clip_tokenizer.h"
#include "tokenizers/t5_tokenizer.h"

namespace fs = std::filesystem;
using diffq::tokenizers::CLIPTokenizer;
using diffq::tokenizers::T5Tokenizer;

namespace {

const fs::path kRoot = DIFFQ_SOURCE_DIR;
const fs::path kModel = kRoot / "models/demo-flux";

const nlohmann::json& fixture() {
  static const nlohmann::json j = [] {
    std::ifstream f(kRoot / "tests/fixtures/demo-tokenizers/ids.json");
    return nlohmann::json::parse(f);
  }();
  return j;
}
const CLIPTokenizer& clip() {
  static const CLIPTokenizer t = CLIPTokenizer::from_pretrained(kModel / "tokenizer");
  return t;
}
const T5Tokenizer& t5() {
  static const T5Tokenizer t = T5Tokenizer::from_pretrained(kModel / "tokenizer_2");
  return t;
}
std::vector<int64_t> ids(const nlohmann::json& j) { return j.get<std::vector<int64_t>>(); }

}  // namespace

TEST(DemoTokenizers, VocabularySizes) {
  EXPECT_EQ(static_cast<int64_t>(clip().vocab_size()), fixture()["clip_vocab_size"].get<int64_t>());
  EXPECT_EQ(static_cast<int64_t>(t5().vocab_size()), fixture()["t5_vocab_size"].get<int64_t>());
  EXPECT_GE(fixture()["entries"].size(), 58u);
}

TEST(DemoTokenizers, ClipMatchesTransformers) {
  for (const auto& e : fixture()["entries"]) {
    const std::string text = e["text"];
    EXPECT_EQ(clip().encode(text), ids(e["clip"])) << "CLIP ids differ for " << nlohmann::json(text).dump();
  }
}

TEST(DemoTokenizers, T5MatchesTransformers) {
  for (const auto& e : fixture()["entries"]) {
    const std::string text = e["text"];
    EXPECT_EQ(t5().encode(text), ids(e["t5"])) << "T5 ids differ for " << nlohmann::json(text).dump();
  }
}

TEST(DemoTokenizers, PaddedAsFluxPipelineCallsThem) {
  for (const auto& e : fixture()["padded"]) {
    const std::string text = e["text"];
    EXPECT_EQ(clip()(text, 77).input_ids, ids(e["clip"])) << nlohmann::json(text).dump();
    EXPECT_EQ(t5()(text, 32).input_ids, ids(e["t5_32"])) << nlohmann::json(text).dump();
    EXPECT_EQ(t5()(text, 8).input_ids, ids(e["t5_8"])) << nlohmann::json(text).dump();
  }
}

TEST(DemoTokenizers, DemoWordsAreSingleClipTokens) {
  // The BPE merges were learnt so that every word of the caption grammar is one token.
  for (const char* w : {"red", "circle", "circles", "triangles", "background", "centre", "center", "purple"}) {
    EXPECT_EQ(clip().encode(w, false).size(), 1u) << w;
  }
}
