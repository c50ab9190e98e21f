// Shared by tests/quant/test_gguf_*.cpp: the fixture folder made by tools/reference/make_quant_gguf.py.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "diffq/tensor.h"
#include "io/safetensors.h"

namespace diffq::quant::gguf::testing {

inline std::filesystem::path fixture_dir() {
  return std::filesystem::path(DIFFQ_SOURCE_DIR) / "tests" / "fixtures" / "quant" / "gguf";
}

// What tools/reference/make_quant_gguf.py made (gguf-py / ggml outputs).
inline std::filesystem::path reference_dir() { return fixture_dir() / "reference"; }

inline const nlohmann::json& expected() {
  static const nlohmann::json j = [] {
    std::ifstream in(reference_dir() / "expected.json");
    return nlohmann::json::parse(in);
  }();
  return j;
}

inline const io::SafetensorsFile& fixture(const std::string& name) {
  static std::map<std::string, io::SafetensorsFile> files;
  auto it = files.find(name);
  if (it == files.end()) it = files.emplace(name, io::SafetensorsFile::open(reference_dir() / name)).first;
  return it->second;
}

inline std::vector<uint8_t> bytes_of(const Tensor& t) {
  const Tensor c = t.contiguous();
  const auto* p = static_cast<const uint8_t*>(c.data_ptr());
  return std::vector<uint8_t>(p, p + c.nbytes());
}

inline std::vector<float> floats_of(const Tensor& t) { return t.to_f32_vector(); }

// Bit equality, except that any NaN matches any NaN (payloads differ between numpy and C).
inline ::testing::AssertionResult same_floats(const float* a, const float* b, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    uint32_t ua, ub;
    std::memcpy(&ua, &a[i], 4);
    std::memcpy(&ub, &b[i], 4);
    if (ua == ub || (a[i] != a[i] && b[i] != b[i])) continue;
    return ::testing::AssertionFailure() << "element " << i << ": " << a[i] << " (0x" << std::hex << ua
                                         << ") vs " << b[i] << " (0x" << ub << ")" << std::dec;
  }
  return ::testing::AssertionSuccess();
}

}  // namespace diffq::quant::gguf::testing
