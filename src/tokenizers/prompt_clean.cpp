#include "tokenizers/prompt_clean.h"

#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include <string>
#include <unordered_map>

#include "diffq/error.h"
#include "tokenizers/ftfy_encoding.h"
#include "tokenizers/unicode.h"

namespace diffq::tokenizers {
namespace {

constexpr std::string_view kCtx = "prompt_clean";

struct HtmlEntity {
  const char* name;
  const char* utf8;
};
#include "tokenizers/html_entities.inc"

using Map = std::unordered_map<std::u32string, std::u32string>;

const Map& html5_entities() {  // Python's html.entities.html5 (names with and without ';')
  static const Map m = [] {
    Map out;
    for (const auto& e : kHtml5Entities) out.emplace(utf8_to_u32(e.name, kCtx), utf8_to_u32(e.utf8, kCtx));
    return out;
  }();
  return m;
}

const Map& ftfy_entities() {  // ftfy.chardata.HTML_ENTITIES, keyed without the leading '&'
  static const Map m = [] {
    Map out;
    for (const auto& [k, v] : html5_entities())
      if (!k.empty() && k.back() == U';') out.emplace(k, v);
    for (const auto& e : kFtfyUpperEntities) out.emplace(utf8_to_u32(e.name, kCtx), utf8_to_u32(e.utf8, kCtx));
    return out;
  }();
  return m;
}

// Windows-1252 for bytes 0x80-0x9F, the five bytes it leaves undefined kept as the C1 code point (ftfy's
// "sloppy-windows-1252", and Python html's replacements for numeric references to 0x80-0x9F).
constexpr char32_t kCp1252[32] = {
    0x20AC, 0x0081, 0x201A, 0x0192, 0x201E, 0x2026, 0x2020, 0x2021, 0x02C6, 0x2030, 0x0160,
    0x2039, 0x0152, 0x008D, 0x017D, 0x008F, 0x0090, 0x2018, 0x2019, 0x201C, 0x201D, 0x2022,
    0x2013, 0x2014, 0x02DC, 0x2122, 0x0161, 0x203A, 0x0153, 0x009D, 0x017E, 0x0178};

bool is_ascii_digit(char32_t c) { return c >= U'0' && c <= U'9'; }
bool is_ascii_alpha(char32_t c) { return (c >= U'a' && c <= U'z') || (c >= U'A' && c <= U'Z'); }
bool is_ascii_hex(char32_t c) { return is_ascii_digit(c) || (c >= U'a' && c <= U'f') || (c >= U'A' && c <= U'F'); }

// Python's str.isspace(): White_Space plus the information separators U+001C..U+001F.
bool py_isspace(char32_t c) { return is_whitespace(c) || (c >= 0x1C && c <= 0x1F); }

// html._replace_charref for a numeric reference; digits are the characters after "#" or "#x".
std::u32string numeric_charref(std::u32string_view digits, bool hex) {
  uint64_t num = 0;
  bool huge = false;
  for (char32_t c : digits) {
    const uint64_t d = is_ascii_digit(c) ? c - U'0' : (c | 0x20) - U'a' + 10;
    num = num * (hex ? 16 : 10) + d;
    if (num > 0x10FFFF) huge = true, num = 0x110000;  // stays out of range, as Python's big ints would
  }
  if (huge || num > 0x10FFFF || (num >= 0xD800 && num <= 0xDFFF)) return U"\uFFFD";
  if (num == 0x00) return U"\uFFFD";
  if (num == 0x0D) return U"\r";
  if (num >= 0x80 && num <= 0x9F) return std::u32string(1, kCp1252[num - 0x80]);
  // html._invalid_codepoints: dropped.
  if ((num >= 0x1 && num <= 0x8) || num == 0xB || (num >= 0xE && num <= 0x1F) || (num >= 0x7F && num <= 0x9F) ||
      (num >= 0xFDD0 && num <= 0xFDEF) || (num & 0xFFFE) == 0xFFFE)
    return U"";
  return std::u32string(1, static_cast<char32_t>(num));
}

// Python's html.unescape on code points: regex &(#[0-9]+;?|#[xX][0-9a-fA-F]+;?|[^\t\n\f <&#;]{1,32};?).
std::u32string unescape_u32(const std::u32string& s) {
  if (s.find(U'&') == std::u32string::npos) return s;
  std::u32string out;
  out.reserve(s.size());
  const size_t n = s.size();
  for (size_t i = 0; i < n;) {
    if (s[i] != U'&') {
      out.push_back(s[i++]);
      continue;
    }
    size_t j = i + 1;
    if (j < n && s[j] == U'#') {
      const bool hex = j + 1 < n && (s[j + 1] == U'x' || s[j + 1] == U'X');
      size_t k = j + (hex ? 2 : 1);
      const size_t d0 = k;
      while (k < n && (hex ? is_ascii_hex(s[k]) : is_ascii_digit(s[k]))) ++k;
      if (k == d0) {  // no digits: "&#" is left as it is (no alternative starts with '#' otherwise)
        out.push_back(s[i++]);
        continue;
      }
      out += numeric_charref(std::u32string_view(s).substr(d0, k - d0), hex);
      if (k < n && s[k] == U';') ++k;
      i = k;
      continue;
    }
    auto name_char = [](char32_t c) {
      return c != U'\t' && c != U'\n' && c != U'\f' && c != U' ' && c != U'<' && c != U'&' && c != U'#' && c != U';';
    };
    size_t k = j;
    while (k < n && k - j < 32 && name_char(s[k])) ++k;
    if (k == j) {
      out.push_back(s[i++]);
      continue;
    }
    if (k < n && s[k] == U';') ++k;
    const std::u32string name = s.substr(j, k - j);
    const Map& html5 = html5_entities();
    if (auto it = html5.find(name); it != html5.end()) {
      out += it->second;
    } else {
      bool found = false;
      for (size_t x = name.size() - 1; x > 1 && !found; --x)
        if (auto p = html5.find(name.substr(0, x)); p != html5.end()) {
          out += p->second;
          out += name.substr(x);
          found = true;
        }
      if (!found) out += U"&" + name;
    }
    i = k;
  }
  return out;
}

// ftfy.fixes.unescape_html: &#?[0-9A-Za-z]{1,24}; -> ftfy's entity table, or html.unescape for numeric ones
// when it consumes the ';'.
std::u32string ftfy_unescape_html(const std::u32string& s) {
  std::u32string out;
  out.reserve(s.size());
  const size_t n = s.size();
  for (size_t i = 0; i < n;) {
    if (s[i] == U'&') {
      size_t j = i + 1;
      auto alnum_run = [&](size_t from) {
        size_t k = from;
        while (k < n && k - from < 24 && (is_ascii_digit(s[k]) || is_ascii_alpha(s[k]))) ++k;
        return k;
      };
      size_t k = 0;
      if (j < n && s[j] == U'#') {
        k = alnum_run(j + 1);
        if (!(k > j + 1 && k < n && s[k] == U';')) k = 0;
      }
      if (k == 0) {  // without '#' (the regex backtracks over the optional '#')
        k = alnum_run(j);
        if (!(k > j && k < n && s[k] == U';')) k = 0;
      }
      if (k) {
        const std::u32string entity = s.substr(i, k + 1 - i);  // "&...;"
        const Map& table = ftfy_entities();
        if (auto it = table.find(entity.substr(1)); it != table.end()) {
          out += it->second;
        } else if (entity.size() > 1 && entity[1] == U'#') {
          const std::u32string u = unescape_u32(entity);
          out += u.find(U';') == std::u32string::npos ? u : entity;
        } else {
          out += entity;
        }
        i = k + 1;
        continue;
      }
    }
    out.push_back(s[i++]);
  }
  return out;
}

std::u32string nfkc_char(char32_t c) {
  UErrorCode err = U_ZERO_ERROR;
  const icu::Normalizer2* n = icu::Normalizer2::getNFKCInstance(err);
  check(U_SUCCESS(err), kCtx, "ICU NFKC normalizer unavailable: ", u_errorName(err));
  const icu::UnicodeString d = n->normalize(icu::UnicodeString(static_cast<UChar32>(c)), err);
  check(U_SUCCESS(err), kCtx, "NFKC normalization failed: ", u_errorName(err));
  std::u32string out;
  for (int32_t i = 0; i < d.length();) {
    const UChar32 x = d.char32At(i);
    out.push_back(static_cast<char32_t>(x));
    i += U16_LENGTH(x);
  }
  return out;
}

// The per-character translations of one pass: fix_c1_controls, fix_latin_ligatures, fix_character_width,
// uncurl_quotes (in that order; each maps one character to a string).
std::u32string translate_chars(const std::u32string& s) {
  static const std::unordered_map<char32_t, std::u32string> ligatures = {
      {U'Ĳ', U"IJ"}, {U'ĳ', U"ij"}, {U'ŉ', U"ʼn"}, {U'Ǳ', U"DZ"}, {U'ǲ', U"Dz"}, {U'ǳ', U"dz"},
      {U'Ǆ', U"DŽ"}, {U'ǅ', U"Dž"}, {U'ǆ', U"dž"}, {U'Ǉ', U"LJ"}, {U'ǈ', U"Lj"}, {U'ǉ', U"lj"},
      {U'Ǌ', U"NJ"}, {U'ǋ', U"Nj"}, {U'ǌ', U"nj"}, {U'ﬀ', U"ff"}, {U'ﬁ', U"fi"}, {U'ﬂ', U"fl"},
      {U'ﬃ', U"ffi"}, {U'ﬄ', U"ffl"}, {U'ﬅ', U"ſt"}, {U'ﬆ', U"st"}};
  auto uncurl = [](std::u32string& t) {
    for (char32_t& c : t) {
      if (c == 0x02BC || (c >= 0x2018 && c <= 0x201B)) c = U'\'';
      else if (c >= 0x201C && c <= 0x201F) c = U'"';
    }
  };
  std::u32string a;  // fix_c1_controls
  a.reserve(s.size());
  for (char32_t c : s) a.push_back(c >= 0x80 && c <= 0x9F ? kCp1252[c - 0x80] : c);
  std::u32string b;  // fix_latin_ligatures
  for (char32_t c : a) {
    if (auto it = ligatures.find(c); it != ligatures.end()) b += it->second;
    else b.push_back(c);
  }
  std::u32string w;  // fix_character_width: U+3000 and the halfwidth/fullwidth forms U+FF01..U+FFEF
  for (char32_t c : b) {
    if (c == 0x3000) w.push_back(U' ');
    else if (c >= 0xFF01 && c <= 0xFFEF) w += nfkc_char(c);
    else w.push_back(c);
  }
  uncurl(w);
  return w;
}

std::u32string fix_line_breaks(const std::u32string& s) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    const char32_t c = s[i];
    if (c == U'\r' && i + 1 < s.size() && s[i + 1] == U'\n') continue;  // "\r\n" -> "\n"
    out.push_back(c == U'\r' || c == 0x2028 || c == 0x2029 || c == 0x85 ? U'\n' : c);
  }
  return out;
}

// ANSI escapes \x1b[ (\d|;)* [a-zA-Z] removed (\d: any decimal digit, as Python's re has it for str).
std::u32string remove_terminal_escapes(const std::u32string& s) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    if (s[i] == 0x1B && i + 1 < s.size() && s[i + 1] == U'[') {
      size_t k = i + 2;
      while (k < s.size() && (s[k] == U';' || u_charType(static_cast<UChar32>(s[k])) == U_DECIMAL_DIGIT_NUMBER)) ++k;
      if (k < s.size() && is_ascii_alpha(s[k])) {
        i = k + 1;
        continue;
      }
    }
    out.push_back(s[i++]);
  }
  return out;
}

bool ftfy_control_char(char32_t c) {
  return c <= 0x08 || c == 0x0B || (c >= 0x0E && c <= 0x1F) || c == 0x7F || (c >= 0x206A && c <= 0x206F) ||
         c == 0xFEFF || (c >= 0xFFF9 && c <= 0xFFFC);
}

std::u32string nfc_u32(const std::u32string& s) { return utf8_to_u32(nfc(u32_to_utf8(s)), kCtx); }

// ftfy.fix_and_explain on one segment.
std::u32string fix_segment(std::u32string text, bool unescape) {
  while (true) {
    const std::u32string before = text;
    if (unescape) text = ftfy_unescape_html(text);
    text = ftfy_fix_encoding(text);
    text = translate_chars(text);
    text = fix_line_breaks(text);
    text = remove_terminal_escapes(text);
    std::u32string kept;
    kept.reserve(text.size());
    for (char32_t c : text)
      if (!ftfy_control_char(c)) kept.push_back(c);
    text = nfc_u32(kept);
    if (text == before) return text;
  }
}

std::u32string ftfy_u32(const std::u32string& text) {
  std::u32string out;
  bool unescape = true;  // unescape_html="auto": off from the first segment that contains '<'
  for (size_t pos = 0; pos < text.size();) {
    size_t brk = text.find(U'\n', pos);
    brk = brk == std::u32string::npos ? text.size() : brk + 1;
    const std::u32string segment = text.substr(pos, brk - pos);
    if (segment.find(U'<') != std::u32string::npos) unescape = false;
    out += fix_segment(segment, unescape);
    pos = brk;
  }
  return out;
}

std::u32string strip(const std::u32string& s) {
  size_t b = 0, e = s.size();
  while (b < e && py_isspace(s[b])) ++b;
  while (e > b && py_isspace(s[e - 1])) --e;
  return s.substr(b, e - b);
}

}  // namespace

std::string html_unescape(std::string_view text) { return u32_to_utf8(unescape_u32(utf8_to_u32(text, kCtx))); }

std::string ftfy_fix_text(std::string_view text) { return u32_to_utf8(ftfy_u32(utf8_to_u32(text, kCtx))); }

std::string wan_prompt_clean(std::string_view text) {
  // basic_clean: ftfy, html.unescape twice, strip.
  std::u32string s = strip(unescape_u32(unescape_u32(ftfy_u32(utf8_to_u32(text, kCtx)))));
  // whitespace_clean: every run of \s (White_Space) becomes one space, then strip.
  std::u32string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    if (is_whitespace(s[i])) {
      while (i < s.size() && is_whitespace(s[i])) ++i;
      out.push_back(U' ');
    } else {
      out.push_back(s[i++]);
    }
  }
  return u32_to_utf8(strip(out));
}

}  // namespace diffq::tokenizers
