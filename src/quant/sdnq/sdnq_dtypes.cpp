#include "quant/sdnq/sdnq_dtypes.h"

#include "diffq/error.h"

namespace diffq::quant::sdnq {

namespace {
const std::vector<SdnqDtype>& table() {
  static const std::vector<SdnqDtype> t = {
      {"int8", 8, -128, 127, false, true, false, DType::i8},
      {"uint8", 8, 0, 255, true, true, false, DType::u8},
      {"int4", 4, -8, 7, false, true, true, DType::u8},
      {"uint4", 4, 0, 15, true, true, true, DType::u8},
      {"int2", 2, -2, 1, false, true, true, DType::u8},
      {"uint2", 2, 0, 3, true, true, true, DType::u8},
      {"float8_e4m3fn", 8, -448, 448, false, false, false, DType::f8_e4m3fn},
      {"float8_e5m2", 8, -57344, 57344, false, false, false, DType::f8_e5m2},
  };
  return t;
}
}  // namespace

const std::vector<std::string>& sdnq_supported_dtypes() {
  static const std::vector<std::string> v = [] {
    std::vector<std::string> r;
    for (const auto& d : table()) r.push_back(d.name);
    return r;
  }();
  return v;
}

const SdnqDtype& sdnq_dtype(const std::string& name, const char* field) {
  for (const auto& d : table())
    if (name == d.name) return d;
  std::string known;
  for (const auto& d : table()) known += (known.empty() ? "" : ", ") + std::string(d.name);
  fail("sdnq", field, " '", name, "' is not supported by diffq (supported: ", known, ")");
}

}  // namespace diffq::quant::sdnq
