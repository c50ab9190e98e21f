#include "quant/modelopt/int8_channel_weight.h"

#include "diffq/error.h"

namespace diffq::quant {

Int8ChannelWeight::Int8ChannelWeight(Tensor qdata, Tensor scale, std::string scheme, const std::string& what)
    : ScaledWeight(qdata.dim() == 2 ? qdata.size(0) : 0, qdata.dim() == 2 ? qdata.size(1) : 0, std::move(scheme)) {
  check(qdata.dim() == 2 && qdata.dtype() == DType::i8, "quant.int8", what, ": the weight must be int8 [N, K], got ", qdata.str());
  check(scale.dtype() == DType::f32 && scale.numel() == n_, "quant.int8", what, ": weight_scale must be float32 [", n_,
        "], got ", scale.str());
  qdata_ = qdata.contiguous();
  scale_ = scale.contiguous().view({n_});
}

void Int8ChannelWeight::dequant_rows_f32(int64_t n0, int64_t n1, float* dst) const {
  const auto* q = qdata_.data<int8_t>();
  const float* s = scale_.data<float>();
  for (int64_t r = n0; r < n1; ++r)
    for (int64_t c = 0; c < k_; ++c) dst[(r - n0) * k_ + c] = float(q[r * k_ + c]) * s[r];
}

}  // namespace diffq::quant
