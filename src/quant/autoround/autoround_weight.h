// An AutoRound (auto-round 0.16) GPTQ-style packed Linear weight, as its export writes and its torch
// QuantLinear (auto_round_extension/torch/qlinear_torch{,_zp}.py) computes:
//   qweight int32 [K * bits / 32, N]: word w of column n holds the codes of rows k = w * (32 / bits) + j
//           at bits [j * bits, (j + 1) * bits) (bits 2, 4, 8);
//   qzeros  int32 [G, N * bits / 32]: zero points packed the same way along N; the "auto_gptq" packings
//           store zp - 1 (decoded + 1), "auto_round" the zero point itself;
//   scales  float16 [G, N]; g_idx int32 [K] (optional): the group of input column k (else k / group_size).
// Dequantized as QuantLinear computes it in a model Diffusers loaded with torch_dtype = the compute dtype
// (its loader casts the float16 scales to that dtype): W[n, k] = scale[g, n] * (q - zp) in the compute
// dtype (exact in float32). Load only: quantizing needs AutoRound's calibration.
#pragma once

#include <memory>
#include <string>

#include "io/safetensors.h"
#include "quant/quantized_weight.h"

namespace diffq::quant::autoround {

struct AutoRoundLayout {
  int bits = 4;
  int64_t group_size = 128;  // -1: one group over K
  bool zero_minus_one = true;  // packing_format has "gptq": qzeros hold zp - 1
};

class AutoRoundWeight final : public QuantizedWeight {
 public:
  AutoRoundWeight(const AutoRoundLayout& layout, Tensor qweight, Tensor qzeros, Tensor scales, Tensor g_idx,
                  Shape shape);
  // "<module>.qweight/.qzeros/.scales[/.g_idx]"; null when "<module>.qweight" is absent.
  static std::shared_ptr<AutoRoundWeight> load(const io::StateDict& sd, const std::string& module, const Shape& shape,
                                               const AutoRoundLayout& layout, std::vector<std::string>& consumed);
  void save(io::StateDict& out, const std::string& module) const;

  std::string scheme() const override { return "autoround_int" + std::to_string(l_.bits); }
  Shape shape() const override { return {n_, k_}; }
  Tensor dequantize(DType dtype) const override;
  std::vector<Tensor> storage_tensors() const override;
  bool has_tile_linear() const override { return true; }
  std::optional<quant::TileLinearPlan> tile_linear_plan(const Tensor& x, const Tensor& bias) const override;

  // Rows [n0, n1) of W (output features) as QuantLinear computes them in dtype `out`, widened to f32.
  void dequant_rows(int64_t n0, int64_t n1, DType out, float* dst) const;
  const AutoRoundLayout& layout() const { return l_; }

 private:
  AutoRoundLayout l_;
  Tensor qweight_, qzeros_, scales_, g_idx_;
  int64_t n_, k_, groups_;
  std::vector<int32_t> group_of_;  // [K]
  std::vector<float> scale_;      // [G, N] widened
  std::vector<int32_t> zero_;     // [G, N] decoded zero points
};

}  // namespace diffq::quant::autoround
