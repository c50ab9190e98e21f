#include "offload/content_hash.h"

#include <cstring>

namespace diffq::offload {

namespace {
constexpr uint64_t K1 = 0x9E3779B185EBCA87ULL, K2 = 0xC2B2AE3D27D4EB4FULL;
constexpr uint64_t K3 = 0x165667B19E3779F9ULL, K4 = 0x85EBCA77C2B2AE63ULL;
inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
inline uint64_t load64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
inline uint64_t fmix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xFF51AFD7ED558CCDULL;
  x ^= x >> 33;
  x *= 0xC4CEB9FE1A85EC53ULL;
  return x ^ (x >> 33);
}
}  // namespace

std::string Hash128::hex() const {
  static const char* digits = "0123456789abcdef";
  std::string s(32, '0');
  for (int i = 0; i < 16; ++i) {
    const uint64_t w = i < 8 ? hi : lo;
    const int shift = (7 - (i % 8)) * 8;
    const unsigned byte = unsigned(w >> shift) & 0xFF;
    s[2 * i] = digits[byte >> 4];
    s[2 * i + 1] = digits[byte & 15];
  }
  return s;
}

ContentHasher::ContentHasher() : a_(K1 ^ 0x6A09E667F3BCC908ULL), b_(K3 ^ 0xBB67AE8584CAA73BULL) {}

void ContentHasher::stripe(const uint8_t* p) {
  a_ = rotl(a_ ^ (load64(p) * K2), 31) * K1;
  b_ = rotl(b_ ^ (load64(p + 8) * K4), 29) * K3;
}

void ContentHasher::update(const void* data, size_t n) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  total_ += n;
  if (tail_n_) {
    const size_t take = std::min(n, 16 - tail_n_);
    std::memcpy(tail_ + tail_n_, p, take);
    tail_n_ += take;
    p += take;
    n -= take;
    if (tail_n_ < 16) return;
    stripe(tail_);
    tail_n_ = 0;
  }
  for (; n >= 16; n -= 16, p += 16) stripe(p);
  std::memcpy(tail_, p, n);
  tail_n_ = n;
}

void ContentHasher::update_field(std::string_view s) {
  const uint64_t len = s.size();
  update(&len, sizeof len);
  update(s);
}

Hash128 ContentHasher::digest() const {
  uint64_t a = a_, b = b_;
  uint8_t last[16] = {};
  std::memcpy(last, tail_, tail_n_);
  a = rotl(a ^ (load64(last) * K2), 31) * K1;
  b = rotl(b ^ (load64(last + 8) * K4), 29) * K3;
  a ^= total_;
  b ^= total_ * K1;
  a += b;
  b += a;
  a = fmix(a);
  b = fmix(b);
  a += b;
  b += a;
  return {a, b};
}

Hash128 content_hash(const void* data, size_t n) {
  ContentHasher h;
  h.update(data, n);
  return h.digest();
}

}  // namespace diffq::offload
