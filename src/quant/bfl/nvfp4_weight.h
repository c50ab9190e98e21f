// NVFP4 (ModelOpt's layout, also BFL's nvfp4 single files): `weight` uint8 [N, K/2] holding two E2M1 codes
// per byte (even element in the low nibble), `weight_scale` float8_e4m3fn [N, K/16] (one scale per block of
// 16 along K), `weight_scale_2` a float32 global scale, `input_scale` the float32 static activation scale.
// W[n, k] = e2m1(code[n, k]) * (float(weight_scale[n, k/16]) * weight_scale_2), each product in float32
// (Diffusers' dequantize_nvfp4).
#pragma once

#include <memory>

#include "quant/bfl/row_select.h"
#include "quant/bfl/scaled_weight.h"

namespace diffq::quant {

inline constexpr int64_t kNvfp4Block = 16;

class Nvfp4Weight final : public ScaledWeight {
 public:
  // `weight_scale_2`: one float32 value ([] or [1]); `k` the logical in_features (2 * weight's columns).
  Nvfp4Weight(Tensor packed, Tensor block_scale, Tensor weight_scale_2, std::string scheme, const std::string& what);
  void dequant_rows_f32(int64_t n0, int64_t n1, float* dst) const override;
  float weight_scale_2() const { return ws2_; }
  std::shared_ptr<Nvfp4Weight> rows(const RowRanges& ranges, const std::string& what) const;

 private:
  std::vector<Tensor> packed_tensors() const override { return {packed_, block_scale_, weight_scale_2_}; }
  Tensor packed_, block_scale_, weight_scale_2_;
  float ws2_ = 0;
};

}  // namespace diffq::quant
