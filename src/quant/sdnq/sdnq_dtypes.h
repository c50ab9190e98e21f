// SDNQ's weight dtypes that diffq implements (sdnq 0.2.8 common.dtype_dict), one traits row each:
// integer codes (signed ones stored as code - min, so every packed code is unsigned), packed
// little-end-first into bytes when narrower than 8 bits (4-bit: two per byte, even index in the low
// nibble; 2-bit: four per byte, index i at bits 2*(i%4)), over the flattened weight; float8 codes as
// torch's float8 tensors. The other SDNQ dtypes (odd widths 3/5/6/7, >8-bit, custom floats, uint1) are
// refused by name.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "diffq/dtype.h"

namespace diffq::quant::sdnq {

struct SdnqDtype {
  const char* name;   // "int8", "uint4", "float8_e4m3fn", ...
  int bits;           // 8, 4, 2
  float min, max;     // dtype_dict's min / max (the code range; +-448 / +-57344 for float8)
  bool is_unsigned;   // asymmetric (scale + zero_point) when true
  bool is_integer;
  bool is_packed;     // bits < 8: several codes per byte (uint8 storage)
  DType storage;      // the file's tensor dtype: i8, u8, f8_e4m3fn, f8_e5m2
};

// The row for `name`; throws naming the value and listing what diffq supports.
const SdnqDtype& sdnq_dtype(const std::string& name, const char* field = "weights_dtype");
const std::vector<std::string>& sdnq_supported_dtypes();

// Code i of a packed array (flat index), already offset back to the signed range for signed dtypes.
inline int32_t sdnq_unpack_code(const uint8_t* packed, int64_t i, const SdnqDtype& d) {
  const int per = 8 / d.bits;
  const int v = (packed[i / per] >> ((i % per) * d.bits)) & ((1 << d.bits) - 1);
  return d.is_unsigned ? v : v + int32_t(d.min);
}

}  // namespace diffq::quant::sdnq
