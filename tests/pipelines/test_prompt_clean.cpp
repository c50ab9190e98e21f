// WanPipeline's prompt_clean (ftfy.fix_text -> html.unescape x2 -> strip -> \s+ collapse) against the real one
// (diffusers 0.42.1, ftfy 6.3.1): tests/fixtures/umt5/prompt_clean.json (tools/reference/make_umt5_fixtures.py),
// a hand-made list (entities, curly quotes, ligatures, fullwidth forms, line breaks, controls, NFC, emoji, CJK,
// zero-width characters), mojibake (corpus text decoded with latin-1, windows-1252/1251, macroman, cp437,
// iso-8859-2) and the tokenizer corpus. fix_encoding marks the cases ftfy's mojibake repair changes.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "common/error_of.h"
#include "tokenizers/prompt_clean.h"

namespace fs = std::filesystem;
using namespace diffq::tokenizers;

namespace {
const nlohmann::json& cases() {
  static const nlohmann::json j = [] {
    std::ifstream f(fs::path(DIFFQ_SOURCE_DIR) / "tests/fixtures/umt5/prompt_clean.json");
    return nlohmann::json::parse(f);
  }();
  return j["cases"];
}
}  // namespace

TEST(PromptClean, MatchesWanPipeline) {
  size_t n = 0, same = 0, mojibake = 0;
  for (const auto& c : cases()) {
    const std::string text = c["text"];
    mojibake += c["fix_encoding"].get<bool>();
    ++n;
    const std::string got = wan_prompt_clean(text), fixed = ftfy_fix_text(text);
    same += got == c["prompt_clean"].get<std::string>();
    EXPECT_EQ(fixed, c["fix_text"].get<std::string>()) << "ftfy.fix_text differs for " << nlohmann::json(text).dump();
    EXPECT_EQ(got, c["prompt_clean"].get<std::string>()) << "prompt_clean differs for " << nlohmann::json(text).dump();
  }
  std::printf("[prompt_clean] %zu/%zu identical (%zu repaired by ftfy's fix_encoding)\n", same, n, mojibake);
  EXPECT_GE(n, 300u);
  EXPECT_GE(mojibake, 30u);
}

TEST(PromptClean, HtmlUnescapeAsPython) {
  EXPECT_EQ(html_unescape("&amp;amp;"), "&amp;");
  EXPECT_EQ(html_unescape("&notit; &notin; &copy &ampx"), "\u00acit; \u2209 \u00a9 &x");
  EXPECT_EQ(html_unescape("&#65;&#x42;&#X43;&#0;&#128;&#x110000;&#xD800;&#1;&#;"), "ABC\uFFFD\u20AC\uFFFD\uFFFD&#;");
  EXPECT_EQ(html_unescape("no entities"), "no entities");
}

TEST(PromptClean, InvalidUtf8IsAnError) {
  EXPECT_NE(diffq::testing::error_of([] { wan_prompt_clean("\xff"); }).find("prompt_clean"), std::string::npos);
}
