// ModelOpt's INT4 AWQ export (W4A16_AWQ): `weight` uint8 [N/2, K] holding signed 4-bit codes of two output
// rows per byte (row 2i in the low nibble, row 2i+1 in the high one: pack_int4_in_uint8), `weight_scale`
// [N, K/group] (one per group of `group` along K), `pre_quant_scale` [K] (AWQ's input smoothing).
// W[n, k] = int4(code[n, k]) * float(weight_scale[n, k / group]) in float32.
#pragma once

#include "quant/bfl/scaled_weight.h"

namespace diffq::quant {

class Int4AwqWeight final : public ScaledWeight {
 public:
  Int4AwqWeight(Tensor packed, Tensor scale, std::string scheme, const std::string& what);
  void dequant_rows_f32(int64_t n0, int64_t n1, float* dst) const override;
  int64_t group_size() const { return group_; }

 private:
  std::vector<Tensor> packed_tensors() const override { return {packed_, scale_}; }
  Tensor packed_, scale_;
  std::vector<float> scale_f_;
  int64_t group_ = 0;
};

}  // namespace diffq::quant
