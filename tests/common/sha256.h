// SHA-256 for tests that compare files and tensors with hashes recorded by Python's hashlib
// (OpenSSL's libcrypto does the hashing; one helper for every test area).
#pragma once

#include <openssl/evp.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "diffq/tensor.h"

namespace diffq::testing {

inline std::string sha256_hex(const void* data, size_t n) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(data, n, md, &len, EVP_sha256(), nullptr);
  static const char* hex = "0123456789abcdef";
  std::string s;
  for (unsigned i = 0; i < len; ++i) {
    s += hex[md[i] >> 4];
    s += hex[md[i] & 15];
  }
  return s;
}
inline std::string sha256_hex(const std::vector<uint8_t>& v) { return sha256_hex(v.data(), v.size()); }
// The tensor's bytes in row-major (contiguous) order.
inline std::string sha256_tensor_hex(const diffq::Tensor& t) {
  const diffq::Tensor c = t.contiguous();
  return sha256_hex(c.data_ptr(), c.nbytes());
}
inline std::string sha256_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  const std::vector<uint8_t> data((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  return sha256_hex(data);
}

}  // namespace diffq::testing
