// Unicode helpers shared by the tokenizers (backed by ICU): UTF-8 <-> code points, the character
// classes the HF tokenizers' regexes use (\p{L}, \p{N}, \s = White_Space), NFC, per-code-point
// lower-casing (Rust's char::to_lowercase, which is what HF tokenizers' Lowercase does), and extended
// grapheme clusters (the unit of the SentencePiece "Precompiled" normalizer in HF tokenizers).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace diffq::tokenizers {

// Decodes UTF-8; throws diffq::Error("[<context>] ...") on malformed input.
std::u32string utf8_to_u32(std::string_view s, std::string_view context);
std::string u32_to_utf8(std::u32string_view s);
void append_utf8(std::string& out, char32_t cp);
// Byte length of the UTF-8 sequence starting with lead byte b (1 for bytes that cannot lead).
int utf8_len(unsigned char b);

bool is_letter(char32_t cp);      // general category L*
bool is_number(char32_t cp);      // general category N*
bool is_whitespace(char32_t cp);  // White_Space property (Rust char::is_whitespace, regex \s)

std::string nfc(std::string_view utf8);
// Each code point lower-cased on its own with the full (unconditional) mapping, e.g. U+0130 -> "i̇".
std::u32string lowercase_each(std::u32string_view s);
// Extended grapheme clusters of a UTF-8 string, as byte ranges (begin, end).
std::vector<std::pair<size_t, size_t>> graphemes(std::string_view utf8);

// Special tokens split out of the raw text before normalization (HF AddedVocabulary, for tokens that
// are special, not normalized, without lstrip/rstrip/single_word): leftmost match, longest at a start.
struct TextPiece {
  std::string_view text;  // the text between special tokens (empty when id >= 0)
  int64_t id = -1;        // the special token's id, or -1 for text
};
struct SpecialToken {
  std::string content;
  int64_t id;
};
std::vector<TextPiece> split_special_tokens(std::string_view text, const std::vector<SpecialToken>& specials);

// tokenizer.json's "added_tokens" (entries with "content" and "id"); an id that is not a non-negative
// integer, or content that is not a string, is an Error naming `source` and the entry.
std::vector<SpecialToken> added_tokens_of(const nlohmann::json& tokenizer_json, std::string_view source);

// The common front of every tokenizer's encode(): rejects malformed UTF-8 (an Error, never a silent
// replacement), splits out the special tokens (their ids are appended as they are) and hands the text
// between them to `encode_text(std::string_view, std::vector<int64_t>&)`.
template <class EncodeText>
void encode_with_special_tokens(std::string_view text, const std::vector<SpecialToken>& specials,
                                std::string_view context, std::vector<int64_t>& ids,
                                EncodeText&& encode_text) {
  utf8_to_u32(text, context);
  for (const TextPiece& p : split_special_tokens(text, specials)) {
    if (p.id >= 0) ids.push_back(p.id);
    else encode_text(p.text, ids);
  }
}

// A whole file's bytes; a missing or unreadable file is an Error naming it.
std::string read_file(const std::filesystem::path& path, std::string_view context);

}  // namespace diffq::tokenizers
