#include "tokenizers/ftfy_encoding.h"

#include <nlohmann/json.hpp>

#include <array>
#include <functional>
#include <optional>
#include <unordered_map>
#include <vector>

#include "diffq/error.h"
#include "tokenizers/unicode.h"

namespace diffq::tokenizers {
namespace {

#include "tokenizers/ftfy_tables.inc"

// ---- a regex syntax tree (Python's sre parse of ftfy's patterns) and a backtracking matcher ----

struct Node {
  enum Kind { kLit, kIn, kAny, kRep, kBranch, kGroup, kBol, kNotBehind, kNotAhead } kind = kLit;
  char32_t lit = 0;
  bool negate = false, cat_space = false, cat_word = false;
  std::vector<std::pair<char32_t, char32_t>> ranges;
  int64_t min = 0, max = 0, width = 0;
  std::vector<std::vector<Node>> alts;  // kBranch
  std::vector<Node> seq;                // kRep, kGroup, kNotBehind, kNotAhead
};
using Seq = std::vector<Node>;

Seq parse_seq(const nlohmann::json& j);

Node parse_node(const nlohmann::json& j) {
  const std::string k = j.at(0);
  Node n;
  if (k == "lit") {
    n.kind = Node::kLit;
    n.lit = j.at(1).get<char32_t>();
  } else if (k == "in") {
    n.kind = Node::kIn;
    n.negate = j.at(1).get<bool>();
    for (const auto& r : j.at(2)) n.ranges.emplace_back(r.at(0).get<char32_t>(), r.at(1).get<char32_t>());
    for (const auto& c : j.at(3)) {
      if (c == "CATEGORY_SPACE") n.cat_space = true;
      else if (c == "CATEGORY_WORD") n.cat_word = true;
      else fail("ftfy", "unsupported regex category ", c.get<std::string>());
    }
  } else if (k == "any") {
    n.kind = Node::kAny;
  } else if (k == "rep") {
    n.kind = Node::kRep;
    n.min = j.at(1).get<int64_t>();
    n.max = j.at(2).get<int64_t>();
    n.seq = parse_seq(j.at(3));
  } else if (k == "branch") {
    n.kind = Node::kBranch;
    for (const auto& a : j.at(1)) n.alts.push_back(parse_seq(a));
  } else if (k == "group") {
    n.kind = Node::kGroup;
    n.seq = parse_seq(j.at(1));
  } else if (k == "bol") {
    n.kind = Node::kBol;
  } else if (k == "notbehind") {
    n.kind = Node::kNotBehind;
    n.width = j.at(1).get<int64_t>();
    n.seq = parse_seq(j.at(2));
  } else if (k == "notahead") {
    n.kind = Node::kNotAhead;
    n.seq = parse_seq(j.at(1));
  } else {
    fail("ftfy", "unsupported regex node ", k);
  }
  return n;
}

Seq parse_seq(const nlohmann::json& j) {
  Seq s;
  for (const auto& n : j) s.push_back(parse_node(n));
  return s;
}

bool py_space(char32_t c) { return is_whitespace(c) || (c >= 0x1C && c <= 0x1F); }            // str.isspace
bool py_word(char32_t c) { return c == U'_' || is_letter(c) || is_number(c); }                  // \w (str.isalnum)

bool one_char(const Node& n, char32_t c) {
  switch (n.kind) {
    case Node::kLit: return c == n.lit;
    case Node::kAny: return c != U'\n';
    case Node::kIn: {
      bool in = (n.cat_space && py_space(c)) || (n.cat_word && py_word(c));
      for (const auto& [lo, hi] : n.ranges) in = in || (c >= lo && c <= hi);
      return in != n.negate;
    }
    default: return false;
  }
}

using Cont = std::function<bool(size_t)>;

bool match_seq(const Seq& seq, size_t i, const std::u32string& s, size_t pos, const Cont& k);

bool match_rep(const Node& n, int64_t count, const std::u32string& s, size_t pos, const Cont& k) {
  if (n.max < 0 || count < n.max) {  // greedy: one more first
    const Cont again = [&](size_t q) { return q != pos && match_rep(n, count + 1, s, q, k); };
    if (match_seq(n.seq, 0, s, pos, again)) return true;
  }
  return count >= n.min && k(pos);
}

bool match_seq(const Seq& seq, size_t i, const std::u32string& s, size_t pos, const Cont& k) {
  if (i == seq.size()) return k(pos);
  const Node& n = seq[i];
  const Cont next = [&](size_t p) { return match_seq(seq, i + 1, s, p, k); };
  switch (n.kind) {
    case Node::kLit:
    case Node::kIn:
    case Node::kAny: return pos < s.size() && one_char(n, s[pos]) && next(pos + 1);
    case Node::kBol: return pos == 0 && next(pos);
    case Node::kGroup: return match_seq(n.seq, 0, s, pos, next);
    case Node::kBranch:
      for (const Seq& alt : n.alts)
        if (match_seq(alt, 0, s, pos, next)) return true;
      return false;
    case Node::kRep: return match_rep(n, 0, s, pos, next);
    case Node::kNotBehind: {
      const size_t w = size_t(n.width);
      const bool hit = pos >= w && match_seq(n.seq, 0, s, pos - w, [&](size_t e) { return e == pos; });
      return !hit && next(pos);
    }
    case Node::kNotAhead: return !match_seq(n.seq, 0, s, pos, [](size_t) { return true; }) && next(pos);
  }
  return false;
}

// re.search: the leftmost match [begin, end) from `from`, if any.
std::optional<std::pair<size_t, size_t>> search(const Seq& re, const std::u32string& s, size_t from = 0) {
  for (size_t b = from; b <= s.size(); ++b) {
    size_t end = 0;
    if (match_seq(re, 0, s, b, [&](size_t e) {
          end = e;
          return true;
        }))
      return std::make_pair(b, end);
  }
  return std::nullopt;
}

// re.sub with a function of the matched text.
std::u32string sub(const Seq& re, const std::u32string& s,
                   const std::function<std::u32string(const std::u32string&)>& f) {
  std::u32string out;
  size_t pos = 0;
  while (pos <= s.size()) {
    const auto m = search(re, s, pos);
    if (!m) break;
    out.append(s, pos, m->first - pos);
    out += f(s.substr(m->first, m->second - m->first));
    if (m->second == m->first) {  // an empty match: step over one character
      if (m->second < s.size()) out.push_back(s[m->second]);
      pos = m->second + 1;
    } else {
      pos = m->second;
    }
  }
  if (pos < s.size()) out.append(s, pos);
  return out;
}

// ---- tables ----

struct Codec {
  std::string name;
  std::array<int32_t, 256> decode{};                // byte -> code point (-1: undefined)
  std::unordered_map<char32_t, unsigned char> encode;  // code point -> byte
  bool can_encode(char32_t c) const { return encode.count(c) > 0; }
};

struct Tables {
  Seq badness, utf8_detector, altered_utf8, lossy_utf8, a_grave_word;
  std::vector<Codec> charmaps;  // ftfy's CHARMAP_ENCODINGS, in its order
  std::array<int32_t, 256> windows_1252{};
};

Codec make_codec(const std::string& name, const nlohmann::json& table) {
  Codec c;
  c.name = name;
  for (size_t b = 0; b < 256; ++b) {
    c.decode[b] = table.at(b).get<int32_t>();
    if (c.decode[b] >= 0) c.encode.emplace(char32_t(c.decode[b]), static_cast<unsigned char>(b));
  }
  return c;
}

const Tables& tables() {
  static const Tables t = [] {
    std::string text;
    for (const char* part : kFtfyTablesJson) text += part;
    const nlohmann::json j = nlohmann::json::parse(text);
    Tables out;
    out.badness = parse_seq(j.at("badness"));
    out.utf8_detector = parse_seq(j.at("utf8_detector"));
    out.altered_utf8 = parse_seq(j.at("altered_utf8"));
    out.lossy_utf8 = parse_seq(j.at("lossy_utf8"));
    out.a_grave_word = parse_seq(j.at("a_grave_word"));
    for (const auto& e : j.at("charmap_encodings")) out.charmaps.push_back(make_codec(e.at(0), e.at(1)));
    for (size_t b = 0; b < 256; ++b) out.windows_1252[b] = j.at("windows-1252").at(b).get<int32_t>();
    return out;
  }();
  return t;
}

// ---- the pieces of _fix_encoding_one_step_and_explain ----

// chardata.possible_encoding: every character is ASCII (but U+001A) or one the codec decodes 0x80-0xFF / 0x1A to.
bool possible_encoding(const std::u32string& s, const Codec& c) {
  for (char32_t ch : s) {
    if (ch <= 0x7F && ch != 0x1A) continue;
    bool ok = false;
    for (int b = 0x80; b < 0x100 && !ok; ++b) ok = c.decode[size_t(b)] == int32_t(ch);
    ok = ok || c.decode[0x1A] == int32_t(ch);
    if (!ok) return false;
  }
  return true;
}

// Bytes are handled as code points 0..255 so the byte patterns run on the same matcher.
std::optional<std::u32string> encode(const std::u32string& s, const Codec& c) {
  std::u32string out;
  for (char32_t ch : s) {
    auto it = c.encode.find(ch);
    if (it == c.encode.end()) return std::nullopt;
    out.push_back(it->second);
  }
  return out;
}

// fixes.restore_byte_a0: "\xc3 " -> "\xc3\xa0 " unless a word follows that makes it Portuguese, then the
// spaces inside ALTERED_UTF8_RE's matches back to 0xA0.
std::u32string restore_byte_a0(const std::u32string& b) {
  const Tables& t = tables();
  const std::u32string a =
      sub(t.a_grave_word, b, [](const std::u32string&) { return std::u32string{0xC3, 0xA0, 0x20}; });
  return sub(t.altered_utf8, a, [](const std::u32string& m) {
    std::u32string r = m;
    for (char32_t& c : r)
      if (c == 0x20) c = 0xA0;
    return r;
  });
}

// fixes.replace_lossy_sequences: LOSSY_UTF8_RE's matches -> the UTF-8 bytes of U+FFFD.
std::u32string replace_lossy_sequences(const std::u32string& b) {
  return sub(tables().lossy_utf8, b, [](const std::u32string&) { return std::u32string{0xEF, 0xBF, 0xBD}; });
}

// Strict UTF-8 of byte values; with `variants`, ftfy's utf-8-variants also take C0 80 as U+0000 and a CESU-8
// surrogate pair (ED A0-AF xx ED B0-BF xx) as one supplementary character. nullopt: a decode error.
std::optional<std::u32string> decode_utf8(const std::u32string& b, bool variants) {
  std::u32string out;
  const size_t n = b.size();
  auto cont = [&](size_t i) { return i < n && (b[i] & 0xC0) == 0x80; };
  for (size_t i = 0; i < n;) {
    const char32_t c = b[i];
    if (variants && c == 0xC0 && i + 1 < n && b[i + 1] == 0x80) {
      out.push_back(0);
      i += 2;
      continue;
    }
    if (variants && c == 0xED && i + 5 < n && b[i + 1] >= 0xA0 && b[i + 1] <= 0xAF && cont(i + 2) &&
        b[i + 3] == 0xED && b[i + 4] >= 0xB0 && b[i + 4] <= 0xBF && cont(i + 5)) {
      out.push_back(((b[i + 1] & 0x0F) << 16) + ((b[i + 2] & 0x3F) << 10) + ((b[i + 4] & 0x0F) << 6) +
                    (b[i + 5] & 0x3F) + 0x10000);
      i += 6;
      continue;
    }
    int len = 0;
    char32_t cp = 0;
    if (c < 0x80) len = 1, cp = c;
    else if (c >= 0xC2 && c <= 0xDF) len = 2, cp = c & 0x1F;
    else if (c >= 0xE0 && c <= 0xEF) len = 3, cp = c & 0x0F;
    else if (c >= 0xF0 && c <= 0xF4) len = 4, cp = c & 0x07;
    else return std::nullopt;
    for (int k = 1; k < len; ++k) {
      if (!cont(i + size_t(k))) return std::nullopt;
      cp = (cp << 6) | (b[i + size_t(k)] & 0x3F);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) || (cp >= 0xD800 && cp <= 0xDFFF))
      return std::nullopt;
    out.push_back(cp);
    i += size_t(len);
  }
  return out;
}

std::u32string fix_c1(const std::u32string& s) {  // fixes.fix_c1_controls (sloppy-windows-1252 on 0x80-0x9F)
  const Codec& sloppy = tables().charmaps.at(1);
  std::u32string out = s;
  for (char32_t& c : out)
    if (c >= 0x80 && c <= 0x9F) c = char32_t(sloppy.decode[c]);
  return out;
}

bool all_ascii(const std::u32string& s) {
  for (char32_t c : s)
    if (c > 0x7F) return false;
  return true;
}

std::u32string decode_inconsistent_utf8(const std::u32string& text);

std::u32string one_step(const std::u32string& text) {
  if (text.empty() || all_ascii(text) || !ftfy_is_bad(text)) return text;
  const Tables& t = tables();
  bool latin1_possible = false;
  for (const Codec& c : t.charmaps) {
    if (!possible_encoding(text, c)) continue;
    if (c.name == "latin-1") latin1_possible = true;
    std::optional<std::u32string> bytes = encode(text, c);
    if (!bytes) continue;  // (cannot happen for a possible encoding)
    if (c.name != "macroman" && search(t.altered_utf8, *bytes)) bytes = restore_byte_a0(*bytes);
    if (c.name.rfind("sloppy", 0) == 0) bytes = replace_lossy_sequences(*bytes);
    bool variants = false;
    for (char32_t b : *bytes) variants = variants || b == 0xED || b == 0xC0;
    if (auto fixed = decode_utf8(*bytes, variants)) return *fixed;
  }
  if (search(t.utf8_detector, text)) {
    const std::u32string fixed = decode_inconsistent_utf8(text);
    if (fixed != text) return fixed;
  }
  if (latin1_possible) {  // ("windows-1252" is never among ftfy's possible encodings: only sloppy-windows-1252)
    std::u32string fixed;
    bool ok = true;
    for (char32_t c : text) {
      const int32_t d = c <= 0xFF ? t.windows_1252[c] : -1;
      if (d < 0) {
        ok = false;
        break;
      }
      fixed.push_back(char32_t(d));
    }
    if (ok && fixed != text) return fixed;
  }
  for (char32_t c : text)
    if (c >= 0x80 && c <= 0x9F) return fix_c1(text);
  return text;
}

// fixes.decode_inconsistent_utf8: each detector match that is shorter than the text and looks bad is fixed.
std::u32string decode_inconsistent_utf8(const std::u32string& text) {
  return sub(tables().utf8_detector, text, [&](const std::u32string& m) {
    return m.size() < text.size() && ftfy_is_bad(m) ? ftfy_fix_encoding(m) : m;
  });
}

}  // namespace

bool ftfy_is_bad(const std::u32string& text) { return search(tables().badness, text).has_value(); }

std::u32string ftfy_fix_encoding(const std::u32string& text) {
  std::u32string cur = text;
  while (true) {
    std::u32string next = one_step(cur);
    if (next == cur) return cur;
    cur = std::move(next);
  }
}

}  // namespace diffq::tokenizers
