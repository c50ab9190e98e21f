#include "quant/modelopt/int4_awq_weight.h"

#include "diffq/error.h"

namespace diffq::quant {

Int4AwqWeight::Int4AwqWeight(Tensor packed, Tensor scale, std::string scheme, const std::string& what)
    : ScaledWeight(packed.dim() == 2 ? 2 * packed.size(0) : 0, packed.dim() == 2 ? packed.size(1) : 0, std::move(scheme)) {
  check(packed.dim() == 2 && packed.dtype() == DType::u8, "quant.int4", what,
        ": the weight must be uint8 [N/2, K] (two rows' int4 codes per byte), got ", packed.str());
  check(scale.dim() == 2 && scale.size(0) == n_ && scale.size(1) > 0 && k_ % scale.size(1) == 0 && is_floating(scale.dtype()),
        "quant.int4", what, ": weight_scale must be float [", n_, ", K/group] with K = ", k_, ", got ", scale.str());
  group_ = k_ / scale.size(1);
  packed_ = packed.contiguous();
  scale_ = scale.contiguous();
  scale_f_ = scale_.to_f32_vector();
}

void Int4AwqWeight::dequant_rows_f32(int64_t n0, int64_t n1, float* dst) const {
  const auto* p = static_cast<const uint8_t*>(packed_.data_ptr());
  const int64_t ng = k_ / group_;
  for (int64_t r = n0; r < n1; ++r) {
    const int shift = (r & 1) ? 4 : 0;
    const uint8_t* row = p + (r / 2) * k_;
    float* d = dst + (r - n0) * k_;
    for (int64_t c = 0; c < k_; ++c) {
      int v = (row[c] >> shift) & 0x0f;
      if (v >= 8) v -= 16;
      d[c] = float(v) * scale_f_[size_t(r * ng + c / group_)];
    }
  }
}

}  // namespace diffq::quant
