// CLIPTokenizer: byte-level BPE with a "</w>" end-of-word suffix, behaving like transformers 5's
// (tokenizers-backed) CLIPTokenizer, which FluxPipeline uses as `tokenizer`:
//   special tokens <|startoftext|>/<|endoftext|> split out of the raw text ->
//   NFC -> every White_Space run becomes " " -> lower-case ->
//   split on <\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+
//   (only the matches are kept) -> GPT-2 byte-level split and byte->unicode mapping ->
//   BPE by merge rank (the word's last symbol carries "</w>") -> bos + ids + eos.
// No ftfy, no strip: the tokenizers-backed class has neither.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizers/unicode.h"

namespace diffq::tokenizers {

// What a tokenizer call with padding="max_length", truncation=True returns.
struct Encoding {
  std::vector<int64_t> input_ids;
  std::vector<int64_t> attention_mask;
};

class CLIPTokenizer {
 public:
  // A tokenizer folder: vocab.json + merges.txt (Hub layout) or tokenizer.json of a BPE model
  // (transformers 5 save_pretrained); tokenizer_config.json (optional) gives the special tokens and
  // model_max_length.
  static CLIPTokenizer from_pretrained(const std::filesystem::path& dir);
  static CLIPTokenizer from_vocab_merges(const std::filesystem::path& vocab_json,
                                         const std::filesystem::path& merges_txt);

  // tokenizer(text).input_ids: bos + tokens + eos (when add_special_tokens), no padding/truncation.
  std::vector<int64_t> encode(std::string_view text, bool add_special_tokens = true) const;
  // tokenizer(text, padding="max_length", max_length=max_length, truncation=True): tokens truncated
  // to max_length - 2, bos/eos added, padded on the right with pad_token_id.
  Encoding operator()(std::string_view text, int max_length) const;
  Encoding operator()(std::string_view text) const { return (*this)(text, model_max_length_); }

  int64_t bos_token_id() const { return bos_id_; }
  int64_t eos_token_id() const { return eos_id_; }
  int64_t pad_token_id() const { return pad_id_; }
  int64_t unk_token_id() const { return unk_id_; }
  int model_max_length() const { return model_max_length_; }
  size_t vocab_size() const { return vocab_.size(); }
  int64_t token_to_id(const std::string& token) const;  // -1 when absent

 private:
  CLIPTokenizer() = default;
  void finish_setup(const std::string& source);
  void add_merge(const std::string& a, const std::string& b, const std::string& source, size_t line);
  void bpe(const std::string& word, std::vector<int64_t>& out) const;
  void encode_text(std::string_view text, std::vector<int64_t>& out) const;

  std::unordered_map<std::string, int64_t> vocab_;
  // (left id << 32 | right id) -> (rank, merged id)
  std::unordered_map<uint64_t, std::pair<int32_t, int64_t>> merges_;
  std::vector<SpecialToken> specials_;
  std::string byte_char_[256];  // byte -> its printable stand-in (UTF-8)
  std::string bos_ = "<|startoftext|>", eos_ = "<|endoftext|>", pad_ = "<|endoftext|>", unk_ = "<|endoftext|>";
  int64_t bos_id_ = -1, eos_id_ = -1, pad_id_ = -1, unk_id_ = -1;
  int model_max_length_ = 77;
};

}  // namespace diffq::tokenizers
