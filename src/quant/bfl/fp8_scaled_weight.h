// An fp8 e4m3 weight [N, K] with a float32 scale per tensor ([] or [1]) or per output row ([N] or [N, 1]):
// BFL's fp8r (per row), ModelOpt's FP8 (per tensor) and FP8_PER_CHANNEL_PER_TOKEN (per row).
// W[n, k] = float(q[n, k]) * scale[n] in float32 (Diffusers' dequantize_fp8r, ModelOpt's
// from_quantized_weight), then rounded to the compute dtype by the linear (ScaledWeight).
#pragma once

#include <memory>

#include "quant/bfl/row_select.h"
#include "quant/bfl/scaled_weight.h"

namespace diffq::quant {

class Fp8ScaledWeight final : public ScaledWeight {
 public:
  // `what` names the tensors in errors ("double_blocks.0.img_attn.qkv.weight in flux-fp8r.safetensors").
  Fp8ScaledWeight(Tensor qdata, Tensor scale, std::string scheme, const std::string& what);
  void dequant_rows_f32(int64_t n0, int64_t n1, float* dst) const override;
  bool per_row() const { return per_row_; }
  const Tensor& qdata() const { return qdata_; }
  const Tensor& scale() const { return scale_; }
  // Rows `ranges` of this weight with their scales (split / swapped fused weights).
  std::shared_ptr<Fp8ScaledWeight> rows(const RowRanges& ranges, const std::string& what) const;

 private:
  std::vector<Tensor> packed_tensors() const override { return {qdata_, scale_}; }
  Tensor qdata_, scale_;  // scale: f32 [N] or [1]
  bool per_row_ = false;
};

}  // namespace diffq::quant
