// diffq's CLIP and T5 tokenizers against transformers' CLIPTokenizer / T5TokenizerFast on the corpus of
// tests/fixtures/tokenizers/corpus.json (tools/reference/make_tokenizer_fixtures.py), loaded from the
// real tokenizer files in tests/fixtures/tiny-flux/tokenizer{,_2}.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "diffq/error.h"
#include "tokenizers/clip_tokenizer.h"
#include "tokenizers/t5_tokenizer.h"

namespace fs = std::filesystem;
using diffq::tokenizers::CLIPTokenizer;
using diffq::tokenizers::T5Tokenizer;

namespace {

const fs::path kRoot = DIFFQ_SOURCE_DIR;
const fs::path kClipDir = kRoot / "tests/fixtures/tiny-flux/tokenizer";
const fs::path kT5Dir = kRoot / "tests/fixtures/tiny-flux/tokenizer_2";

const nlohmann::json& corpus() {
  static const nlohmann::json j = [] {
    std::ifstream f(kRoot / "tests/fixtures/tokenizers/corpus.json");
    return nlohmann::json::parse(f);
  }();
  return j;
}
const CLIPTokenizer& clip() {
  static const CLIPTokenizer t = CLIPTokenizer::from_pretrained(kClipDir);
  return t;
}
const T5Tokenizer& t5() {
  static const T5Tokenizer t = T5Tokenizer::from_pretrained(kT5Dir);
  return t;
}

std::vector<int64_t> ids(const nlohmann::json& j) { return j.get<std::vector<int64_t>>(); }

// Padded reference = stored ids (attention-mask part) + pad up to max_length.
void expect_padded(const diffq::tokenizers::Encoding& e, const nlohmann::json& stored, int max_length,
                   int64_t pad, const std::string& text, const char* what) {
  std::vector<int64_t> want = ids(stored);
  std::vector<int64_t> mask(want.size(), 1);
  want.resize(static_cast<size_t>(max_length), pad);
  mask.resize(static_cast<size_t>(max_length), 0);
  EXPECT_EQ(e.input_ids, want) << what << " padded ids differ for " << nlohmann::json(text).dump();
  EXPECT_EQ(e.attention_mask, mask) << what << " attention mask differs for " << nlohmann::json(text).dump();
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const diffq::Error& e) {
    return e.what();
  }
  return "(no error)";
}

fs::path scratch(const std::string& name) {
  const fs::path p = fs::temp_directory_path() / ("diffq_tok_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

}  // namespace

TEST(Tokenizers, CorpusIsLargeAndVaried) {
  const auto& cases = corpus()["cases"];
  ASSERT_GE(cases.size(), 200u);
  bool clip_long = false, t5_long = false;
  for (const auto& c : cases) {
    clip_long |= c["clip_ids"].size() > 77;
    t5_long |= c["t5_ids"].size() > 512;
  }
  EXPECT_TRUE(clip_long && t5_long);
}

TEST(Tokenizers, ClipMatchesTransformersOnCorpus) {
  const auto& cfg = corpus()["clip"];
  EXPECT_EQ(clip().bos_token_id(), cfg["bos_id"].get<int64_t>());
  EXPECT_EQ(clip().eos_token_id(), cfg["eos_id"].get<int64_t>());
  EXPECT_EQ(clip().pad_token_id(), cfg["pad_id"].get<int64_t>());
  EXPECT_EQ(clip().model_max_length(), 77);
  size_t same = 0, n = 0;
  for (const auto& c : corpus()["cases"]) {
    const std::string text = c["text"];
    const auto got = clip().encode(text);
    ++n;
    same += got == ids(c["clip_ids"]);
    EXPECT_EQ(got, ids(c["clip_ids"])) << "CLIP ids differ for " << nlohmann::json(text).dump();
    expect_padded(clip()(text, 77), c["clip_max"], 77, cfg["pad_id"], text, "CLIP");
  }
  std::printf("[ CLIP ] %zu/%zu prompts identical\n", same, n);
}

TEST(Tokenizers, T5MatchesTransformersOnCorpus) {
  const auto& cfg = corpus()["t5"];
  EXPECT_EQ(t5().eos_token_id(), cfg["eos_id"].get<int64_t>());
  EXPECT_EQ(t5().pad_token_id(), cfg["pad_id"].get<int64_t>());
  EXPECT_EQ(t5().model_max_length(), 512);
  size_t same = 0, n = 0;
  for (const auto& c : corpus()["cases"]) {
    const std::string text = c["text"];
    const auto got = t5().encode(text);
    ++n;
    same += got == ids(c["t5_ids"]);
    EXPECT_EQ(got, ids(c["t5_ids"])) << "T5 ids differ for " << nlohmann::json(text).dump();
    expect_padded(t5()(text, 512), c["t5_max"], 512, cfg["pad_id"], text, "T5");
  }
  std::printf("[ T5 ] %zu/%zu prompts identical\n", same, n);
}

TEST(Tokenizers, KnownPromptsAndPadding) {
  EXPECT_EQ(clip().encode("a photo of a cat"), (std::vector<int64_t>{49406, 320, 1125, 539, 320, 2368, 49407}));
  EXPECT_EQ(t5().encode("a photo of a cat"), (std::vector<int64_t>{3, 9, 1202, 13, 3, 9, 1712, 1}));
  const auto e = clip()("a photo of a cat", 10);
  EXPECT_EQ(e.input_ids, (std::vector<int64_t>{49406, 320, 1125, 539, 320, 2368, 49407, 49407, 49407, 49407}));
  EXPECT_EQ(e.attention_mask, (std::vector<int64_t>{1, 1, 1, 1, 1, 1, 1, 0, 0, 0}));
  // Truncation keeps bos/eos at the ends.
  const auto c4 = clip()("a photo of a cat", 4);
  EXPECT_EQ(c4.input_ids, (std::vector<int64_t>{49406, 320, 1125, 49407}));
  const auto t3 = t5()("a photo of a cat", 3);
  EXPECT_EQ(t3.input_ids, (std::vector<int64_t>{3, 9, 1}));
  EXPECT_EQ(t5()("", 4).input_ids, (std::vector<int64_t>{1, 0, 0, 0}));
  EXPECT_EQ(clip()("", 3).input_ids, (std::vector<int64_t>{49406, 49407, 49407}));
  EXPECT_EQ(clip().encode("cat", false), (std::vector<int64_t>{2368}));
  EXPECT_EQ(t5().encode("cat", false).back(), 1712);
}

TEST(Tokenizers, ClipFromTokenizerJson) {
  // A folder with only tokenizer.json (transformers 5 save_pretrained layout) gives the same ids.
  const fs::path dir = scratch("clipjson");
  nlohmann::json vocab;
  std::ifstream(kClipDir / "vocab.json") >> vocab;
  nlohmann::json merges = nlohmann::json::array();
  std::ifstream mf(kClipDir / "merges.txt");
  for (std::string line; std::getline(mf, line);)
    if (!line.empty() && !line.starts_with("#version")) merges.push_back(line);
  nlohmann::json tj = {{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}},
                       {"added_tokens", {{{"id", 49406}, {"content", "<|startoftext|>"}},
                                         {{"id", 49407}, {"content", "<|endoftext|>"}}}}};
  std::ofstream(dir / "tokenizer.json") << tj.dump();
  fs::copy_file(kClipDir / "tokenizer_config.json", dir / "tokenizer_config.json");
  const CLIPTokenizer t = CLIPTokenizer::from_pretrained(dir);
  size_t k = 0;
  for (const auto& c : corpus()["cases"]) {
    if (k++ % 5) continue;
    EXPECT_EQ(t.encode(c["text"].get<std::string>()), ids(c["clip_ids"]));
  }
  fs::remove_all(dir);
}

TEST(Tokenizers, ErrorsNameTheFile) {
  const fs::path none = kRoot / "tests/fixtures/no-such-tokenizer";
  EXPECT_NE(error_of([&] { CLIPTokenizer::from_pretrained(none); }).find("[CLIPTokenizer] missing tokenizer folder"),
            std::string::npos);
  EXPECT_NE(error_of([&] { T5Tokenizer::from_pretrained(none); }).find("[T5Tokenizer] missing tokenizer folder"),
            std::string::npos);

  const fs::path dir = scratch("bad");
  std::string msg = error_of([&] { CLIPTokenizer::from_pretrained(dir); });
  EXPECT_NE(msg.find("[CLIPTokenizer] missing file"), std::string::npos) << msg;
  EXPECT_NE(msg.find("vocab.json"), std::string::npos) << msg;
  msg = error_of([&] { T5Tokenizer::from_pretrained(dir); });
  EXPECT_NE(msg.find("[T5Tokenizer] missing file"), std::string::npos) << msg;
  EXPECT_NE(msg.find("tokenizer.json"), std::string::npos) << msg;

  fs::copy_file(kClipDir / "vocab.json", dir / "vocab.json");
  msg = error_of([&] { CLIPTokenizer::from_pretrained(dir); });
  EXPECT_NE(msg.find("merges.txt"), std::string::npos) << msg;
  std::ofstream(dir / "merges.txt") << "#version: 0.2\nnot-a-merge-line\n";
  msg = error_of([&] { CLIPTokenizer::from_pretrained(dir); });
  EXPECT_NE(msg.find("[CLIPTokenizer]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("merges.txt: line 2"), std::string::npos) << msg;
  std::ofstream(dir / "merges.txt") << "zzzq zzzq\n";
  msg = error_of([&] { CLIPTokenizer::from_pretrained(dir); });
  EXPECT_NE(msg.find("missing from the vocabulary"), std::string::npos) << msg;
  std::ofstream(dir / "vocab.json") << "{not json";
  msg = error_of([&] { CLIPTokenizer::from_pretrained(dir); });
  EXPECT_NE(msg.find("invalid JSON in"), std::string::npos) << msg;
  EXPECT_NE(msg.find("vocab.json"), std::string::npos) << msg;

  std::ofstream(dir / "tokenizer.json") << "[1, 2";
  msg = error_of([&] { T5Tokenizer::from_pretrained(dir); });
  EXPECT_NE(msg.find("[T5Tokenizer] invalid JSON in"), std::string::npos) << msg;
  std::ofstream(dir / "tokenizer.json") << R"({"model": {"type": "BPE", "vocab": {}}})";
  msg = error_of([&] { T5Tokenizer::from_pretrained(dir); });
  EXPECT_NE(msg.find("not a Unigram model"), std::string::npos) << msg;
  std::ofstream(dir / "tokenizer.json")
      << R"({"model": {"type": "Unigram", "unk_id": 0, "vocab": [["<unk>", 0.0]]},
            "normalizer": {"type": "Precompiled", "precompiled_charsmap": "AAAA"}})";
  msg = error_of([&] { T5Tokenizer::from_pretrained(dir); });
  EXPECT_NE(msg.find("precompiled_charsmap"), std::string::npos) << msg;
  fs::remove_all(dir);
}

TEST(Tokenizers, InvalidUtf8IsAnError) {
  EXPECT_THROW(clip().encode("bad \xff byte"), diffq::Error);
  EXPECT_THROW(t5().encode("bad \xc3"), diffq::Error);
}
