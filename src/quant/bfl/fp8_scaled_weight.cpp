#include "quant/bfl/fp8_scaled_weight.h"

#include "diffq/error.h"

namespace diffq::quant {

Fp8ScaledWeight::Fp8ScaledWeight(Tensor qdata, Tensor scale, std::string scheme, const std::string& what)
    : ScaledWeight(qdata.dim() == 2 ? qdata.size(0) : 0, qdata.dim() == 2 ? qdata.size(1) : 0, std::move(scheme)) {
  check(qdata.dim() == 2 && qdata.dtype() == DType::f8_e4m3fn, "quant.fp8", what, ": the weight must be float8_e4m3fn [N, K], got ",
        qdata.str());
  check(scale.dtype() == DType::f32, "quant.fp8", what, ": weight_scale must be float32, got ", scale.str());
  const int64_t sn = scale.numel();
  per_row_ = sn == n_ && (scale.dim() == 1 || (scale.dim() == 2 && scale.size(1) == 1)) && !(n_ == 1 && scale.dim() == 0);
  check(per_row_ || sn == 1, "quant.fp8", what, ": weight_scale has shape ", shape_str(scale.shape()),
        ", expected one scale ([] or [1]) or one per row ([", n_, "])");
  qdata_ = qdata.contiguous();
  scale_ = scale.contiguous().view({sn});
}

void Fp8ScaledWeight::dequant_rows_f32(int64_t n0, int64_t n1, float* dst) const {
  float lut[256];
  for (int i = 0; i < 256; ++i) lut[i] = f8_e4m3fn_to_f32(uint8_t(i));
  const auto* q = static_cast<const uint8_t*>(qdata_.data_ptr());
  const float* s = scale_.data<float>();
  for (int64_t r = n0; r < n1; ++r) {
    const float sc = s[per_row_ ? r : 0];
    float* d = dst + (r - n0) * k_;
    const uint8_t* qr = q + r * k_;
    for (int64_t c = 0; c < k_; ++c) d[c] = lut[qr[c]] * sc;
  }
}

std::shared_ptr<Fp8ScaledWeight> Fp8ScaledWeight::rows(const RowRanges& ranges, const std::string& what) const {
  Tensor s = per_row_ ? select_rows(scale_, ranges, what + " weight_scale") : scale_;
  auto w = std::make_shared<Fp8ScaledWeight>(select_rows(qdata_, ranges, what), s, scheme_, what);
  w->input_scale_ = input_scale_;
  w->pre_quant_scale_ = pre_quant_scale_;
  return w;
}

}  // namespace diffq::quant
