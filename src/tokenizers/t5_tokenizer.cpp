#include "tokenizers/t5_tokenizer.h"

#include <nlohmann/json.hpp>

#include <cstring>
#include <limits>

#include "diffq/error.h"

namespace diffq::tokenizers {
namespace {

constexpr std::string_view kCtx = "T5Tokenizer";
constexpr std::string_view kMeta = "\xE2\x96\x81";  // U+2581 "▁"
constexpr double kUnkPenalty = 10.0;
constexpr int64_t kT5UnkId = 2;  // transformers' T5Tokenizer: Unigram(vocab, unk_id=2, byte_fallback=False)

nlohmann::json parse_json(const std::filesystem::path& path) {
  const std::string text = read_file(path, kCtx);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail(kCtx, "invalid JSON in ", path.string(), ": ", e.what());
  }
}

std::string base64_decode(std::string_view in, const std::string& source) {
  auto val = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::string out;
  out.reserve(in.size() * 3 / 4);
  uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    if (c == '=') break;
    const int v = val(c);
    check(v >= 0, kCtx, source, ": precompiled_charsmap is not valid base64");
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  return out;
}

bool config_token(const nlohmann::json& cfg, const char* key, std::string& out) {
  auto it = cfg.find(key);
  if (it == cfg.end()) return false;
  if (it->is_string()) out = it->get<std::string>();
  else if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) out = (*it)["content"];
  else return false;
  return true;
}

// The "precompiled_charsmap" of a Precompiled normalizer, alone or inside a Sequence.
const nlohmann::json* find_charsmap(const nlohmann::json& n) {
  if (!n.is_object()) return nullptr;
  if (n.value("type", "") == "Precompiled" && n.contains("precompiled_charsmap")) return &n["precompiled_charsmap"];
  if (n.contains("normalizers") && n["normalizers"].is_array())
    for (const auto& sub : n["normalizers"])
      if (const auto* p = find_charsmap(sub)) return p;
  return nullptr;
}

}  // namespace

// ---- precompiled charsmap -------------------------------------------------------------------------

PrecompiledCharsmap::PrecompiledCharsmap(std::string blob, const std::string& source) {
  if (blob.empty()) return;
  check(blob.size() >= 4, kCtx, source, ": precompiled_charsmap is shorter than its header");
  const auto* b = reinterpret_cast<const unsigned char*>(blob.data());
  const uint32_t trie_bytes = b[0] | (b[1] << 8) | (b[2] << 16) | (uint32_t(b[3]) << 24);
  check(trie_bytes % 4 == 0 && trie_bytes >= 4 && trie_bytes <= blob.size() - 4, kCtx, source,
        ": precompiled_charsmap trie size ", trie_bytes, " does not fit its ", blob.size(), " bytes");
  units_.resize(trie_bytes / 4);
  for (size_t i = 0; i < units_.size(); ++i) {
    const unsigned char* u = b + 4 + 4 * i;
    units_[i] = u[0] | (u[1] << 8) | (u[2] << 16) | (uint32_t(u[3]) << 24);
  }
  pool_ = blob.substr(4 + trie_bytes);
  pool_.push_back('\0');  // every lookup ends at a NUL, even in a truncated pool
}

const char* PrecompiledCharsmap::transform(std::string_view chunk) const {
  // Darts unit layout: bit 8 has_leaf, bits 0-7 (+ bit 31) label, value = low 31 bits,
  // offset = (unit >> 10) << ((unit & (1 << 9)) >> 6).
  auto offset = [](uint32_t u) -> size_t { return size_t(u >> 10) << ((u & (1u << 9)) >> 6); };
  size_t pos = 0;
  pos ^= offset(units_[0]);
  for (unsigned char c : chunk) {
    if (c == 0) break;
    pos ^= c;
    if (pos >= units_.size()) return nullptr;
    const uint32_t u = units_[pos];
    if ((u & ((1u << 31) | 0xFFu)) != c) return nullptr;
    pos ^= offset(u);
    if (pos >= units_.size()) return nullptr;
    if ((u >> 8) & 1) {
      const size_t at = units_[pos] & ((1u << 31) - 1);
      return at < pool_.size() ? pool_.data() + at : nullptr;
    }
  }
  return nullptr;
}

std::string PrecompiledCharsmap::normalize(std::string_view text) const {
  if (empty()) return std::string(text);
  std::string out;
  out.reserve(text.size());
  for (auto [b, e] : graphemes(text)) {
    const std::string_view g = text.substr(b, e - b);
    if (g.size() < 6)
      if (const char* r = transform(g)) {
        out += r;
        continue;
      }
    for (size_t i = 0; i < g.size();) {
      const size_t n = std::min<size_t>(utf8_len(static_cast<unsigned char>(g[i])), g.size() - i);
      const std::string_view ch = g.substr(i, n);
      if (const char* r = transform(ch)) out += r;
      else out += ch;
      i += n;
    }
  }
  return out;
}

// ---- loading ----------------------------------------------------------------------------------------

T5Tokenizer T5Tokenizer::from_tokenizer_json(const std::filesystem::path& path) {
  const std::string src = path.string();
  const nlohmann::json j = parse_json(path);
  check(j.is_object() && j.contains("model") && j["model"].is_object(), kCtx, src, ": no \"model\" object");
  const auto& model = j["model"];
  check(model.value("type", "") == "Unigram" && model.contains("vocab") && model["vocab"].is_array(), kCtx, src,
        ": model is not a Unigram model with a vocab list");
  T5Tokenizer t;
  double min_score = std::numeric_limits<double>::infinity();
  for (const auto& e : model["vocab"]) {
    check(e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_number(), kCtx, src, ": vocab entry ",
          t.pieces_.size(), " is not [piece, score]");
    t.pieces_.emplace_back(e[0].get<std::string>(), e[1].get<double>());
    t.ids_[t.pieces_.back().first] = static_cast<int64_t>(t.pieces_.size() - 1);
    t.max_piece_bytes_ = std::max(t.max_piece_bytes_, t.pieces_.back().first.size());
    min_score = std::min(min_score, t.pieces_.back().second);
  }
  check(!t.pieces_.empty(), kCtx, src, ": empty vocab");
  t.unk_score_ = min_score - kUnkPenalty;
  const nlohmann::json normalizer = j.value("normalizer", nlohmann::json());
  if (const auto* cm = find_charsmap(normalizer); cm && cm->is_string())
    t.charsmap_ = PrecompiledCharsmap(base64_decode(cm->get<std::string>(), src), src);
  // transformers 5.24's T5Tokenizer keeps only the vocab (and the Precompiled charsmap) of a tokenizer.json and
  // rebuilds the Unigram model itself with unk_id=2 and byte_fallback=False, whatever model.unk_id and
  // model.byte_fallback say. umt5-xxl's file (WanPipeline) has unk_id 3 and byte pieces <0xNN>: through
  // transformers an unknown character still becomes id 2 ("<s>" there), never byte pieces. So does diffq.
  check(t.pieces_.size() > size_t(kT5UnkId), kCtx, src, ": the vocab has ", t.pieces_.size(),
        " pieces; T5Tokenizer's unknown id ", kT5UnkId, " needs at least ", kT5UnkId + 1);
  t.unk_id_ = kT5UnkId;
  t.specials_ = added_tokens_of(j, src);
  t.eos_id_ = t.token_to_id("</s>");
  t.pad_id_ = t.token_to_id("<pad>");
  return t;
}

T5Tokenizer T5Tokenizer::from_pretrained(const std::filesystem::path& dir) {
  std::error_code ec;
  check(std::filesystem::is_directory(dir, ec), kCtx, "missing tokenizer folder ", dir.string());
  check(std::filesystem::exists(dir / "tokenizer.json", ec), kCtx, "missing file ",
        (dir / "tokenizer.json").string(), " (needed for T5TokenizerFast behaviour)");
  T5Tokenizer t = from_tokenizer_json(dir / "tokenizer.json");
  std::string eos = "</s>", pad = "<pad>";
  const auto cfg_path = dir / "tokenizer_config.json";
  if (std::filesystem::exists(cfg_path, ec)) {
    const nlohmann::json cfg = parse_json(cfg_path);
    config_token(cfg, "eos_token", eos);
    config_token(cfg, "pad_token", pad);
    if (auto it = cfg.find("model_max_length"); it != cfg.end() && it->is_number()) {
      const double m = it->get<double>();
      check(m >= 1, kCtx, cfg_path.string(), ": model_max_length ", m, " is below 1");
      t.model_max_length_ = m < 1e9 ? static_cast<int>(m) : std::numeric_limits<int>::max();
    }
  }
  t.eos_id_ = t.token_to_id(eos);
  t.pad_id_ = t.token_to_id(pad);
  check(t.eos_id_ >= 0, kCtx, dir.string(), ": eos_token \"", eos, "\" is not in the vocabulary");
  check(t.pad_id_ >= 0, kCtx, dir.string(), ": pad_token \"", pad, "\" is not in the vocabulary");
  return t;
}

int64_t T5Tokenizer::token_to_id(const std::string& token) const {
  auto it = ids_.find(token);
  if (it != ids_.end()) return it->second;
  for (const auto& s : specials_)
    if (s.content == token) return s.id;
  return -1;
}

// ---- encoding ---------------------------------------------------------------------------------------

void T5Tokenizer::unigram(std::string_view s, std::vector<int64_t>& out) const {
  struct Best {
    double score = 0;
    size_t start = 0;
    int64_t id = -1;
  };
  const size_t n = s.size();
  std::vector<Best> best(n + 1);
  best[0].id = 0;  // reached
  std::string key;
  for (size_t start = 0; start < n;) {
    const double base = best[start].score;
    const size_t ch = std::min<size_t>(utf8_len(static_cast<unsigned char>(s[start])), n - start);
    bool single = false;
    for (size_t len = 1; len <= max_piece_bytes_ && start + len <= n; ++len) {
      key.assign(s.data() + start, len);
      auto it = ids_.find(key);
      if (it == ids_.end()) continue;
      const double cand = base + pieces_[static_cast<size_t>(it->second)].second;
      Best& b = best[start + len];
      if (b.id < 0 || cand > b.score) b = {cand, start, it->second};
      single = single || len == ch;
    }
    if (!single) {
      const double cand = base + unk_score_;
      Best& b = best[start + ch];
      if (b.id < 0 || cand > b.score) b = {cand, start, unk_id_};
    }
    start += ch;
  }
  // Back-track; consecutive unknowns are fused into one token (looked up again, <unk> if absent).
  std::vector<int64_t> rev;
  std::string fused;
  auto flush = [&] {
    if (fused.empty()) return;
    const auto it = ids_.find(fused);
    rev.push_back(it == ids_.end() ? unk_id_ : it->second);
    fused.clear();
  };
  for (size_t end = n; end > 0;) {
    const Best& b = best[end];
    if (b.id == unk_id_) {
      fused.insert(0, s.substr(b.start, end - b.start));
    } else {
      flush();
      rev.push_back(b.id);
    }
    end = b.start;
  }
  flush();
  out.insert(out.end(), rev.rbegin(), rev.rend());
}

void T5Tokenizer::encode_text(std::string_view text, std::vector<int64_t>& out) const {
  const std::string norm = charsmap_.normalize(text);
  const std::u32string cps = utf8_to_u32(norm, kCtx);
  std::string word;
  for (size_t i = 0; i <= cps.size(); ++i) {
    if (i < cps.size() && !is_whitespace(cps[i])) {
      append_utf8(word, cps[i]);
      continue;
    }
    if (word.empty()) continue;
    // Metaspace: "▁" in front of the word unless it has one, then a piece starts at every "▁".
    if (!std::string_view(word).starts_with(kMeta)) word.insert(0, kMeta);
    size_t from = 0;
    while (from < word.size()) {
      size_t next = word.find(kMeta, from + kMeta.size());
      if (next == std::string::npos) next = word.size();
      unigram(std::string_view(word).substr(from, next - from), out);
      from = next;
    }
    word.clear();
  }
}

std::vector<int64_t> T5Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  std::vector<int64_t> ids;
  encode_with_special_tokens(text, specials_, kCtx, ids,
                             [this](std::string_view t, std::vector<int64_t>& out) { encode_text(t, out); });
  if (add_special_tokens) ids.push_back(eos_id_);
  return ids;
}

Encoding T5Tokenizer::operator()(std::string_view text, int max_length) const {
  check(max_length >= 1, kCtx, "max_length ", max_length, " leaves no room for eos");
  std::vector<int64_t> ids = encode(text, false);
  if (ids.size() > static_cast<size_t>(max_length - 1)) ids.resize(static_cast<size_t>(max_length - 1));
  Encoding e;
  e.input_ids = std::move(ids);
  e.input_ids.push_back(eos_id_);
  e.attention_mask.assign(e.input_ids.size(), 1);
  e.input_ids.resize(static_cast<size_t>(max_length), pad_id_);
  e.attention_mask.resize(static_cast<size_t>(max_length), 0);
  return e;
}

}  // namespace diffq::tokenizers
