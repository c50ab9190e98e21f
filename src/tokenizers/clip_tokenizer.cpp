#include "tokenizers/clip_tokenizer.h"

#include <nlohmann/json.hpp>

#include <limits>

#include "diffq/error.h"

namespace diffq::tokenizers {
namespace {

constexpr std::string_view kCtx = "CLIPTokenizer";
constexpr std::string_view kSuffix = "</w>";

nlohmann::json parse_json(const std::filesystem::path& path) {
  const std::string text = read_file(path, kCtx);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail(kCtx, "invalid JSON in ", path.string(), ": ", e.what());
  }
}

// tokenizer_config.json stores a token as "text" or as {"content": "text", ...}.
bool config_token(const nlohmann::json& cfg, const char* key, std::string& out) {
  auto it = cfg.find(key);
  if (it == cfg.end()) return false;
  if (it->is_string()) out = it->get<std::string>();
  else if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) out = (*it)["content"];
  else return false;
  return true;
}

bool starts_with_at(std::u32string_view s, size_t i, std::u32string_view lit) {
  return s.size() - i >= lit.size() && s.compare(i, lit.size(), lit) == 0;
}

// The CLIP split regex, hand-written: returns the kept pieces (whitespace is dropped).
std::vector<std::u32string_view> clip_pieces(std::u32string_view s) {
  static const std::u32string_view literals[] = {U"<|startoftext|>", U"<|endoftext|>", U"'s", U"'t", U"'re",
                                                 U"'ve", U"'m", U"'ll", U"'d"};
  std::vector<std::u32string_view> out;
  const size_t n = s.size();
  for (size_t i = 0; i < n;) {
    const char32_t c = s[i];
    if (is_whitespace(c)) {
      ++i;
      continue;
    }
    size_t len = 0;
    for (auto lit : literals)
      if (starts_with_at(s, i, lit)) {
        len = lit.size();
        break;
      }
    if (len == 0) {
      if (is_letter(c)) {
        while (i + len < n && is_letter(s[i + len])) ++len;
      } else if (is_number(c)) {
        len = 1;
      } else {
        while (i + len < n && !is_whitespace(s[i + len]) && !is_letter(s[i + len]) && !is_number(s[i + len])) ++len;
      }
    }
    out.push_back(s.substr(i, len));
    i += len;
  }
  return out;
}

}  // namespace

int64_t CLIPTokenizer::token_to_id(const std::string& token) const {
  auto it = vocab_.find(token);
  return it == vocab_.end() ? -1 : it->second;
}

void CLIPTokenizer::add_merge(const std::string& a, const std::string& b, const std::string& source, size_t line) {
  const int64_t ia = token_to_id(a), ib = token_to_id(b), im = token_to_id(a + b);
  check(ia >= 0 && ib >= 0 && im >= 0, kCtx, source, ": merge ", line, " (\"", a, " ", b,
        "\") uses a token missing from the vocabulary");
  const uint64_t key = (static_cast<uint64_t>(ia) << 32) | static_cast<uint64_t>(ib);
  merges_.try_emplace(key, static_cast<int32_t>(merges_.size()), im);
}

CLIPTokenizer CLIPTokenizer::from_vocab_merges(const std::filesystem::path& vocab_json,
                                               const std::filesystem::path& merges_txt) {
  CLIPTokenizer t;
  const nlohmann::json v = parse_json(vocab_json);
  check(v.is_object() && !v.empty(), kCtx, vocab_json.string(), ": expected a JSON object token -> id");
  for (const auto& [tok, id] : v.items()) {
    check(id.is_number_integer() && id.get<int64_t>() >= 0, kCtx, vocab_json.string(), ": id of \"", tok,
          "\" is not a non-negative integer");
    t.vocab_[tok] = id.get<int64_t>();
  }
  const std::string merges = read_file(merges_txt, kCtx);
  size_t line_no = 0;
  for (size_t pos = 0; pos < merges.size();) {
    size_t end = merges.find('\n', pos);
    if (end == std::string::npos) end = merges.size();
    std::string_view line(merges.data() + pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || (line_no == 1 && line.starts_with("#version"))) continue;
    const size_t sp = line.find(' ');
    check(sp != std::string_view::npos && sp > 0 && sp + 1 < line.size() && line.find(' ', sp + 1) == std::string_view::npos,
          kCtx, merges_txt.string(), ": line ", line_no, " is not \"left right\"");
    t.add_merge(std::string(line.substr(0, sp)), std::string(line.substr(sp + 1)), merges_txt.string(), line_no);
  }
  t.finish_setup(vocab_json.string());
  return t;
}

CLIPTokenizer CLIPTokenizer::from_pretrained(const std::filesystem::path& dir) {
  std::error_code ec;
  check(std::filesystem::is_directory(dir, ec), kCtx, "missing tokenizer folder ", dir.string());
  CLIPTokenizer t;
  if (std::filesystem::exists(dir / "vocab.json", ec) || !std::filesystem::exists(dir / "tokenizer.json", ec)) {
    check(std::filesystem::exists(dir / "vocab.json", ec) && std::filesystem::exists(dir / "merges.txt", ec), kCtx,
          "missing file ", (dir / (std::filesystem::exists(dir / "vocab.json", ec) ? "merges.txt" : "vocab.json")).string(),
          " (a CLIP tokenizer folder needs vocab.json + merges.txt or tokenizer.json)");
    t = from_vocab_merges(dir / "vocab.json", dir / "merges.txt");
  } else {
    const auto path = dir / "tokenizer.json";
    const nlohmann::json j = parse_json(path);
    const auto model = j.value("model", nlohmann::json::object());
    check(model.value("type", "") == "BPE" && model.contains("vocab") && model["vocab"].is_object() &&
              model.contains("merges") && model["merges"].is_array(),
          kCtx, path.string(), ": model is not a BPE model with vocab and merges");
    for (const auto& [tok, id] : model["vocab"].items()) {
      check(id.is_number_integer(), kCtx, path.string(), ": id of \"", tok, "\" is not an integer");
      t.vocab_[tok] = id.get<int64_t>();
    }
    size_t i = 0;
    for (const auto& m : model["merges"]) {
      ++i;
      if (m.is_string()) {  // "left right"
        const std::string s = m;
        const size_t sp = s.find(' ');
        check(sp != std::string::npos, kCtx, path.string(), ": merge ", i, " is not \"left right\"");
        t.add_merge(s.substr(0, sp), s.substr(sp + 1), path.string(), i);
      } else {
        check(m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string(), kCtx, path.string(),
              ": merge ", i, " is not [left, right]");
        t.add_merge(m[0], m[1], path.string(), i);
      }
    }
    t.specials_ = added_tokens_of(j, path.string());
  }
  if (std::filesystem::exists(dir / "tokenizer_config.json", ec)) {
    const nlohmann::json cfg = parse_json(dir / "tokenizer_config.json");
    config_token(cfg, "bos_token", t.bos_);
    config_token(cfg, "eos_token", t.eos_);
    config_token(cfg, "pad_token", t.pad_);
    config_token(cfg, "unk_token", t.unk_);
    if (auto it = cfg.find("model_max_length"); it != cfg.end() && it->is_number()) {
      const double m = it->get<double>();
      check(m >= 2, kCtx, (dir / "tokenizer_config.json").string(), ": model_max_length ", m, " is below 2");
      t.model_max_length_ = m < 1e9 ? static_cast<int>(m) : std::numeric_limits<int>::max();
    }
  }
  t.finish_setup(dir.string());
  return t;
}

void CLIPTokenizer::finish_setup(const std::string& source) {
  auto need = [&](const std::string& tok, const char* what) {
    const int64_t id = token_to_id(tok);
    check(id >= 0, kCtx, source, ": ", what, " \"", tok, "\" is not in the vocabulary");
    return id;
  };
  bos_id_ = need(bos_, "bos_token");
  eos_id_ = need(eos_, "eos_token");
  pad_id_ = need(pad_, "pad_token");
  unk_id_ = need(unk_, "unk_token");
  for (const std::string* s : {&bos_, &eos_, &unk_, &pad_}) {
    bool have = false;
    for (const auto& sp : specials_) have = have || sp.content == *s;
    if (!have) specials_.push_back({*s, token_to_id(*s)});
  }
  // GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves, the rest map to 256 + k.
  int k = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    byte_char_[b].clear();
    append_utf8(byte_char_[b], static_cast<char32_t>(printable ? b : 256 + k++));
  }
}

void CLIPTokenizer::bpe(const std::string& word, std::vector<int64_t>& out) const {
  std::vector<int64_t> sym;
  std::string mapped;
  for (unsigned char b : word) mapped += byte_char_[b];
  for (size_t i = 0; i < mapped.size();) {
    const int n = utf8_len(static_cast<unsigned char>(mapped[i]));
    std::string ch = mapped.substr(i, n);
    i += n;
    if (i == mapped.size()) ch += kSuffix;
    const int64_t id = token_to_id(ch);
    sym.push_back(id >= 0 ? id : unk_id_);
  }
  // Merge the lowest-ranked adjacent pair (leftmost on ties) until no pair has a merge.
  while (sym.size() > 1) {
    int32_t best_rank = std::numeric_limits<int32_t>::max();
    size_t best = 0;
    int64_t merged = -1;
    for (size_t i = 0; i + 1 < sym.size(); ++i) {
      auto it = merges_.find((static_cast<uint64_t>(sym[i]) << 32) | static_cast<uint64_t>(sym[i + 1]));
      if (it != merges_.end() && it->second.first < best_rank) {
        best_rank = it->second.first;
        best = i;
        merged = it->second.second;
      }
    }
    if (merged < 0) break;
    sym[best] = merged;
    sym.erase(sym.begin() + static_cast<std::ptrdiff_t>(best) + 1);
  }
  out.insert(out.end(), sym.begin(), sym.end());
}

void CLIPTokenizer::encode_text(std::string_view text, std::vector<int64_t>& out) const {
  const std::u32string cps = utf8_to_u32(nfc(text), kCtx);
  std::u32string collapsed;
  collapsed.reserve(cps.size());
  for (size_t i = 0; i < cps.size(); ++i) {
    if (!is_whitespace(cps[i])) {
      collapsed.push_back(cps[i]);
      continue;
    }
    collapsed.push_back(U' ');
    while (i + 1 < cps.size() && is_whitespace(cps[i + 1])) ++i;
  }
  const std::u32string lower = lowercase_each(collapsed);
  for (std::u32string_view piece : clip_pieces(lower)) {
    // The byte-level pre-tokenizer's GPT-2 split only changes the special-token look-alikes:
    // "<|endoftext|>" -> "<|", "endoftext", "|>".
    if (piece == U"<|startoftext|>" || piece == U"<|endoftext|>") {
      bpe("<|", out);
      bpe(u32_to_utf8(piece.substr(2, piece.size() - 4)), out);
      bpe("|>", out);
    } else {
      bpe(u32_to_utf8(piece), out);
    }
  }
}

std::vector<int64_t> CLIPTokenizer::encode(std::string_view text, bool add_special_tokens) const {
  std::vector<int64_t> ids;
  if (add_special_tokens) ids.push_back(bos_id_);
  encode_with_special_tokens(text, specials_, kCtx, ids,
                             [this](std::string_view t, std::vector<int64_t>& out) { encode_text(t, out); });
  if (add_special_tokens) ids.push_back(eos_id_);
  return ids;
}

Encoding CLIPTokenizer::operator()(std::string_view text, int max_length) const {
  check(max_length >= 2, kCtx, "max_length ", max_length, " leaves no room for bos and eos");
  std::vector<int64_t> ids = encode(text, false);
  if (ids.size() > static_cast<size_t>(max_length - 2)) ids.resize(static_cast<size_t>(max_length - 2));
  Encoding e;
  e.input_ids.reserve(static_cast<size_t>(max_length));
  e.input_ids.push_back(bos_id_);
  e.input_ids.insert(e.input_ids.end(), ids.begin(), ids.end());
  e.input_ids.push_back(eos_id_);
  e.attention_mask.assign(e.input_ids.size(), 1);
  e.input_ids.resize(static_cast<size_t>(max_length), pad_id_);
  e.attention_mask.resize(static_cast<size_t>(max_length), 0);
  return e;
}

}  // namespace diffq::tokenizers
