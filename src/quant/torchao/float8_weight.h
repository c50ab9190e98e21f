// torchao's Float8Tensor (Float8WeightOnlyConfig; with activation kwargs
// Float8DynamicActivationFloat8WeightConfig): qdata float8 [N, K], scale f32 [N/bn, K/bk].
// Quantize (torch kernel path): scale = amax(|block|) / fp8_max computed in the weight dtype, then f32;
// q = fp8(clamp(x_f32 / scale, -max, max)). No eps: an all-zero block gives scale 0 and NaN codes, as in
// torchao. Dequantize: fp8 * scale in f32, cast to the output dtype.
#pragma once

#include <optional>

#include "quant/torchao/config.h"
#include "quant/torchao/torchao_weight.h"

namespace diffq::quant::torchao {

struct Float8ActQuant {
  DType float8 = DType::f8_e4m3fn;
  Granularity granularity;  // PerTensor or PerRow(-1)
};

class Float8Weight final : public TorchaoWeight {
 public:
  Float8Weight(Tensor qdata, Tensor scale, int64_t bn, int64_t bk, DType dtype, std::optional<Float8ActQuant> act);
  static std::shared_ptr<Float8Weight> quantize(const Tensor& w, DType float8, const Granularity& g,
                                                std::optional<Float8ActQuant> act);

  std::string scheme() const override { return act_ ? "torchao_float8dq" : "torchao_float8wo"; }
  std::string tensor_class() const override { return "Float8Tensor"; }
  nlohmann::json tensor_attributes() const override;
  std::vector<std::pair<std::string, Tensor>> tensor_data() const override;
  void dequant_rows(int64_t n0, int64_t n1, DType out, float* dst) const override;
  bool has_tile_linear() const override { return true; }
  std::optional<quant::TileLinearPlan> tile_linear_plan(const Tensor& x, const Tensor& bias) const override;

  const Tensor& qdata() const { return qdata_; }  // float8 [N, K]
  const Tensor& scale() const { return scale_; }  // f32 [N/bn, K/bk]
  int64_t block_rows() const { return bn_; }
  int64_t block_cols() const { return bk_; }
  bool dynamic_activation() const { return act_.has_value(); }
  const std::optional<Float8ActQuant>& act_quant() const { return act_; }

 private:
  Tensor qdata_, scale_;
  int64_t bn_, bk_;
  std::optional<Float8ActQuant> act_;
  std::vector<float> scale_f_;
};

// Float8Tensor.from_hp on activations x [M, K] (f32 values of dtype dt): per-token or per-tensor scale,
// fp8 codes widened back to f32 and multiplied by the scale (what the scaled GEMM consumes).
void float8_quant_dequant_activations(const float* x, int64_t m, int64_t k, DType dt, const Float8ActQuant& a,
                                      float* out);

}  // namespace diffq::quant::torchao
