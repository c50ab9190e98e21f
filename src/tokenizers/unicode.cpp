#include "tokenizers/unicode.h"

#include <unicode/brkiter.h>
#include <unicode/locid.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include <fstream>
#include <memory>
#include <sstream>

#include "diffq/error.h"

namespace diffq::tokenizers {

int utf8_len(unsigned char b) {
  if (b < 0x80) return 1;
  if ((b & 0xE0) == 0xC0) return 2;
  if ((b & 0xF0) == 0xE0) return 3;
  if ((b & 0xF8) == 0xF0) return 4;
  return 1;
}

std::u32string utf8_to_u32(std::string_view s, std::string_view context) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    const int n = utf8_len(b);
    check(b < 0x80 || (b >= 0xC2 && b <= 0xF4), context, "text is not valid UTF-8 (byte ", int(b),
          " at offset ", i, ")");
    check(i + n <= s.size(), context, "text is not valid UTF-8 (truncated sequence at offset ", i, ")");
    char32_t cp = n == 1 ? b : n == 2 ? (b & 0x1F) : n == 3 ? (b & 0x0F) : (b & 0x07);
    for (int k = 1; k < n; ++k) {
      const auto c = static_cast<unsigned char>(s[i + k]);
      check((c & 0xC0) == 0x80, context, "text is not valid UTF-8 (bad continuation at offset ", i + k, ")");
      cp = (cp << 6) | (c & 0x3F);
    }
    const bool overlong = (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000);
    check(!overlong && cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF), context,
          "text is not valid UTF-8 (bad code point at offset ", i, ")");
    out.push_back(cp);
    i += n;
  }
  return out;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string u32_to_utf8(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t cp : s) append_utf8(out, cp);
  return out;
}

bool is_letter(char32_t cp) { return (U_GET_GC_MASK(static_cast<UChar32>(cp)) & U_GC_L_MASK) != 0; }
bool is_number(char32_t cp) { return (U_GET_GC_MASK(static_cast<UChar32>(cp)) & U_GC_N_MASK) != 0; }
bool is_whitespace(char32_t cp) { return u_isUWhiteSpace(static_cast<UChar32>(cp)); }

std::string nfc(std::string_view utf8) {
  UErrorCode err = U_ZERO_ERROR;
  const icu::Normalizer2* n = icu::Normalizer2::getNFCInstance(err);
  check(U_SUCCESS(err), "tokenizer", "ICU NFC normalizer unavailable: ", u_errorName(err));
  const auto src = icu::UnicodeString::fromUTF8(icu::StringPiece(utf8.data(), static_cast<int32_t>(utf8.size())));
  icu::UnicodeString dst = n->normalize(src, err);
  check(U_SUCCESS(err), "tokenizer", "NFC normalization failed: ", u_errorName(err));
  std::string out;
  dst.toUTF8String(out);
  return out;
}

std::u32string lowercase_each(std::u32string_view s) {
  std::u32string out;
  out.reserve(s.size());
  const icu::Locale& root = icu::Locale::getRoot();
  for (char32_t cp : s) {
    if (cp < 0x80) {
      out.push_back(cp >= 'A' && cp <= 'Z' ? cp + 32 : cp);
      continue;
    }
    icu::UnicodeString one(static_cast<UChar32>(cp));
    one.toLower(root);
    for (int32_t i = 0; i < one.length();) {
      const UChar32 c = one.char32At(i);
      out.push_back(static_cast<char32_t>(c));
      i += U16_LENGTH(c);
    }
  }
  return out;
}

std::vector<std::pair<size_t, size_t>> graphemes(std::string_view utf8) {
  std::vector<std::pair<size_t, size_t>> out;
  if (utf8.empty()) return out;
  const auto u16 = icu::UnicodeString::fromUTF8(icu::StringPiece(utf8.data(), static_cast<int32_t>(utf8.size())));
  // UTF-16 offset -> UTF-8 offset, walking both strings together.
  std::vector<size_t> byte_at(static_cast<size_t>(u16.length()) + 1, utf8.size());
  for (int32_t i = 0, b = 0; i < u16.length();) {
    byte_at[i] = static_cast<size_t>(b);
    const UChar32 c = u16.char32At(i);
    i += U16_LENGTH(c);
    b += c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4;
  }
  UErrorCode err = U_ZERO_ERROR;
  std::unique_ptr<icu::BreakIterator> it(icu::BreakIterator::createCharacterInstance(icu::Locale::getRoot(), err));
  check(U_SUCCESS(err), "tokenizer", "ICU grapheme iterator unavailable: ", u_errorName(err));
  it->setText(u16);
  int32_t start = it->first();
  for (int32_t end = it->next(); end != icu::BreakIterator::DONE; start = end, end = it->next())
    out.emplace_back(byte_at[start], byte_at[end]);
  return out;
}

std::vector<SpecialToken> added_tokens_of(const nlohmann::json& j, std::string_view source) {
  std::vector<SpecialToken> out;
  const auto it = j.find("added_tokens");
  if (it == j.end() || it->is_null()) return out;
  check(it->is_array(), "tokenizer", source, ": added_tokens is not a list");
  size_t i = 0;
  for (const auto& a : *it) {
    ++i;
    if (!a.is_object() || !a.contains("content") || !a.contains("id")) continue;
    const auto& id = a["id"];
    // Through get<int64_t>, a float id (1e30) is an out-of-range conversion and a string one an
    // exception without the file's name.
    check(a["content"].is_string() && id.is_number_integer() &&
              (id.is_number_unsigned() ? id.get<uint64_t>() <= uint64_t(INT64_MAX) : id.get<int64_t>() >= 0),
          "tokenizer", source, ": added_tokens entry ", i, " needs a string content and an id >= 0, got ",
          a.dump().substr(0, 120));
    out.push_back({a["content"].get<std::string>(), id.get<int64_t>()});
  }
  return out;
}

std::vector<TextPiece> split_special_tokens(std::string_view text, const std::vector<SpecialToken>& specials) {
  std::vector<TextPiece> out;
  size_t text_start = 0;
  for (size_t i = 0; i < text.size();) {
    const SpecialToken* best = nullptr;
    for (const auto& s : specials)
      if (!s.content.empty() && text.compare(i, s.content.size(), s.content) == 0 &&
          (!best || s.content.size() > best->content.size()))
        best = &s;
    if (!best) {
      ++i;
      continue;
    }
    if (i > text_start) out.push_back({text.substr(text_start, i - text_start), -1});
    out.push_back({{}, best->id});
    i += best->content.size();
    text_start = i;
  }
  if (text_start < text.size()) out.push_back({text.substr(text_start), -1});
  return out;
}

std::string read_file(const std::filesystem::path& path, std::string_view context) {
  std::error_code ec;
  check(std::filesystem::is_regular_file(path, ec), context, "missing file ", path.string());
  std::ifstream f(path, std::ios::binary);
  check(f.good(), context, "cannot open ", path.string());
  std::ostringstream ss;
  ss << f.rdbuf();
  check(!f.bad(), context, "cannot read ", path.string());
  return ss.str();
}

}  // namespace diffq::tokenizers
