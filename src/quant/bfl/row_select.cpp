#include "quant/bfl/row_select.h"

#include <cstring>

#include "diffq/error.h"

namespace diffq::quant {

Tensor select_rows(const Tensor& t, const RowRanges& ranges, const std::string& what) {
  check(t.dim() >= 1, "quant.rows", what, " is a scalar, it has no rows");
  const Tensor c = t.contiguous();
  const int64_t n = c.size(0);
  const size_t row_bytes = n ? c.nbytes() / size_t(n) : 0;
  int64_t total = 0;
  for (const auto& [r0, r1] : ranges) {
    check(0 <= r0 && r0 <= r1 && r1 <= n, "quant.rows", what, ": rows [", r0, ", ", r1, ") outside its ", n, " rows");
    total += r1 - r0;
  }
  Shape s = c.shape();
  s[0] = total;
  Tensor out = Tensor::empty(s, c.dtype());
  auto* dst = static_cast<uint8_t*>(out.data_ptr());
  const auto* src = static_cast<const uint8_t*>(c.data_ptr());
  for (const auto& [r0, r1] : ranges) {
    std::memcpy(dst, src + size_t(r0) * row_bytes, size_t(r1 - r0) * row_bytes);
    dst += size_t(r1 - r0) * row_bytes;
  }
  return out;
}

}  // namespace diffq::quant
