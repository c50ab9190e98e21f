// ModelOpt's INT8 export (W8A8_SQ_PER_CHANNEL / INT8_WO): `weight` int8 [N, K], `weight_scale` float32 [N]
// (one per output row), optional `pre_quant_scale` [K] (SmoothQuant) and `input_scale`.
// W[n, k] = float(q[n, k]) * weight_scale[n] in float32 (ModelOpt's from_quantized_weight).
#pragma once

#include "quant/bfl/scaled_weight.h"

namespace diffq::quant {

class Int8ChannelWeight final : public ScaledWeight {
 public:
  Int8ChannelWeight(Tensor qdata, Tensor scale, std::string scheme, const std::string& what);
  void dequant_rows_f32(int64_t n0, int64_t n1, float* dst) const override;

 private:
  std::vector<Tensor> packed_tensors() const override { return {qdata_, scale_}; }
  Tensor qdata_, scale_;
};

}  // namespace diffq::quant
