// torchao's Int4Tensor (Int4WeightOnlyConfig, plain packing, version 2): qdata int8 [N, K/2] holding two
// signed 4-bit codes per byte (column 2j in the LOW nibble, 2j+1 in the high one), scale and zero_point
// [K/g, N] (transposed) in the weight dtype; w = q * scale + zero_point. Quantization is mslk's
// int4_row_quantize_zp (asymmetric, float-domain zero point), all in f32:
//   scale = max(max - min, 1e-6) / 15, zero = min + 8 * scale, q = clamp(round((x - min) / scale), 0, 15) - 8
// then scale/zero are cast to the weight dtype. torchao 0.18's Int4Tensor has no dequantize(); ours is
// q * scale + zero in f32 (two roundings, no FMA) cast to the weight dtype.
#pragma once

#include "quant/torchao/torchao_weight.h"

namespace diffq::quant::torchao {

class Int4Weight final : public TorchaoWeight {
 public:
  Int4Weight(Tensor qdata, Tensor scale, Tensor zero_point, int64_t group_size, Shape shape);
  static std::shared_ptr<Int4Weight> quantize(const Tensor& w, int64_t group_size);

  std::string scheme() const override { return "torchao_int4wo"; }
  std::string tensor_class() const override { return "Int4Tensor"; }
  nlohmann::json tensor_attributes() const override;
  std::vector<std::pair<std::string, Tensor>> tensor_data() const override;
  void dequant_rows(int64_t n0, int64_t n1, DType out, float* dst) const override;
  bool has_tile_linear() const override { return true; }
  std::optional<quant::TileLinearPlan> tile_linear_plan(const Tensor& x, const Tensor& bias) const override;
  int64_t group_size() const { return g_; }
  const Tensor& qdata() const { return qdata_; }
  // scale and zero_point widened to f32 and transposed to [N, K/g] (row r's groups at r * K/g).
  const std::vector<float>& scale_nk() const { return scale_nk_; }
  const std::vector<float>& zero_nk() const { return zero_nk_; }

 private:
  Tensor qdata_, scale_, zero_;
  int64_t g_;
  std::vector<float> scale_nk_, zero_nk_;  // widened and transposed to [N, K/g]
};

// One row of an Int4Tensor: k codes packed two per byte (even column in the low nibble, signed), one
// scale/zero per group of g: dst[c] = float(q) * scale + zero (two f32 roundings, never fused). The scalar
// reference of the CPU's kernel (backend/cpu/quant/torchao_int4_dequant.h).
void dequant_int4_row_reference(const uint8_t* packed, int64_t k, int64_t g, const float* scale, const float* zero,
                                float* dst);

}  // namespace diffq::quant::torchao
