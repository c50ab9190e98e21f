// T5 tokenizer behaving like transformers' T5TokenizerFast (what FluxPipeline uses as `tokenizer_2`),
// read from tokenizer.json (a Unigram model):
//   special tokens (</s>, <pad>, <unk>, <extra_id_N>) split out of the raw text ->
//   "Precompiled" normalizer (SentencePiece's nmt_nfkc charsmap, a double-array trie, applied per
//   extended grapheme cluster as HF tokenizers does) -> split on White_Space -> Metaspace (prepend
//   "▁" to each word, split before every "▁") -> Unigram Viterbi (unknown characters fused into one
//   unknown token) -> ids + </s>.
// As transformers 5.24's T5Tokenizer, only the vocab, the Precompiled charsmap and the added tokens are taken
// from tokenizer.json; the rest is T5Tokenizer's own: unknown id 2 (not model.unk_id) and no byte fallback,
// other normalizers (umt5-xxl's Replace " {2,}"), pre-tokenizers and post-processors in the file are ignored.
// This is what WanPipeline's tokenizer (umt5-xxl's tokenizer.json through T5TokenizerFast) does.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizers/clip_tokenizer.h"  // Encoding
#include "tokenizers/unicode.h"

namespace diffq::tokenizers {

// SentencePiece's precompiled character map: a Darts double-array trie over UTF-8 keys whose values
// are offsets of NUL-terminated replacements in a string pool.
class PrecompiledCharsmap {
 public:
  PrecompiledCharsmap() = default;
  // The raw blob (base64-decoded "precompiled_charsmap"); `source` names it in errors.
  PrecompiledCharsmap(std::string blob, const std::string& source);
  bool empty() const { return units_.empty(); }
  // HF tokenizers' Precompiled normalizer on a whole string.
  std::string normalize(std::string_view text) const;

 private:
  // Replacement for the shortest key that prefixes `chunk` (what HF's spm_precompiled uses), or null.
  const char* transform(std::string_view chunk) const;
  std::vector<uint32_t> units_;
  std::string pool_;
};

class T5Tokenizer {
 public:
  // A tokenizer folder with tokenizer.json (+ optional tokenizer_config.json for eos/pad/max length).
  static T5Tokenizer from_pretrained(const std::filesystem::path& dir);
  static T5Tokenizer from_tokenizer_json(const std::filesystem::path& tokenizer_json);

  // tokenizer(text).input_ids: tokens + eos (when add_special_tokens), no padding/truncation.
  std::vector<int64_t> encode(std::string_view text, bool add_special_tokens = true) const;
  // tokenizer(text, padding="max_length", max_length=max_length, truncation=True).
  Encoding operator()(std::string_view text, int max_length) const;
  Encoding operator()(std::string_view text) const { return (*this)(text, model_max_length_); }

  int64_t eos_token_id() const { return eos_id_; }
  int64_t pad_token_id() const { return pad_id_; }
  int64_t unk_token_id() const { return unk_id_; }
  int model_max_length() const { return model_max_length_; }
  size_t vocab_size() const { return pieces_.size(); }
  int64_t token_to_id(const std::string& token) const;  // -1 when absent

 private:
  T5Tokenizer() = default;
  void unigram(std::string_view piece, std::vector<int64_t>& out) const;
  void encode_text(std::string_view text, std::vector<int64_t>& out) const;

  std::vector<std::pair<std::string, double>> pieces_;
  std::unordered_map<std::string, int64_t> ids_;
  size_t max_piece_bytes_ = 0;
  double unk_score_ = 0;
  PrecompiledCharsmap charsmap_;
  std::vector<SpecialToken> specials_;
  int64_t eos_id_ = 1, pad_id_ = 0, unk_id_ = 2;
  int model_max_length_ = 512;
};

}  // namespace diffq::tokenizers
