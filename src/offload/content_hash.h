// A fast 128-bit content hash (two independent 64-bit multiply-rotate lanes over 16-byte stripes,
// length-finalised). It keys the disk files of group offloading: a file's name carries the hash of
// the group's weight bytes plus the model/quantization config, so a file written for other weights is
// never picked up (Diffusers keys files by group id only and loads stale ones silently). Not
// cryptographic: it guards against accidental staleness, not against an adversary.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace diffq::offload {

struct Hash128 {
  uint64_t lo = 0, hi = 0;
  std::string hex() const;  // 32 lowercase hex digits
  bool operator==(const Hash128&) const = default;
};

class ContentHasher {
 public:
  ContentHasher();
  void update(const void* data, size_t n);
  void update(std::string_view s) { update(s.data(), s.size()); }
  // Length-prefixed, so that ("ab", "c") and ("a", "bc") differ.
  void update_field(std::string_view s);
  Hash128 digest() const;

 private:
  void stripe(const uint8_t* p);
  uint64_t a_, b_;
  uint64_t total_ = 0;
  uint8_t tail_[16];
  size_t tail_n_ = 0;
};

Hash128 content_hash(const void* data, size_t n);

}  // namespace diffq::offload
