// Base64 (RFC 4648, with padding) for b64_json images and data: URLs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace diffq::serve {

inline std::string base64_encode(const uint8_t* data, size_t n) {
  static constexpr char tbl[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((n + 2) / 3 * 4);
  for (size_t i = 0; i < n; i += 3) {
    const uint32_t v = uint32_t(data[i]) << 16 | (i + 1 < n ? uint32_t(data[i + 1]) << 8 : 0) | (i + 2 < n ? data[i + 2] : 0);
    out += tbl[v >> 18 & 63];
    out += tbl[v >> 12 & 63];
    out += i + 1 < n ? tbl[v >> 6 & 63] : '=';
    out += i + 2 < n ? tbl[v & 63] : '=';
  }
  return out;
}
inline std::string base64_encode(const std::string& s) {
  return base64_encode(reinterpret_cast<const uint8_t*>(s.data()), s.size());
}

}  // namespace diffq::serve
