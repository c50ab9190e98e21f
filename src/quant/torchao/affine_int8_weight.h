// torchao's int8-coded affine tensors: Int8Tensor (Int8WeightOnlyConfig and, with activation kwargs,
// Int8DynamicActivationInt8WeightConfig) and IntxUnpackedToInt8Tensor (IntxWeightOnlyConfig, int1..int8
// codes held one per int8). Both are qdata int8 [N, K], scale [N/bn, K/bk], zero_point int8 [N/bn, K/bk]
// with block (bn, bk); they differ in the scale dtype (Int8Tensor: f32; Intx: the weight dtype or
// scale_dtype), the eps of choose_qparams, and their serialized attributes.
#pragma once

#include <optional>

#include "quant/torchao/config.h"
#include "quant/torchao/torchao_weight.h"

namespace diffq::quant::torchao {

class AffineInt8Weight final : public TorchaoWeight {
 public:
  enum class Flavor { Int8Tensor, IntxUnpacked };

  // From torchao's tensors (loading). scale/zero_point must have shape [N/bn, K/bk].
  AffineInt8Weight(Flavor flavor, Tensor qdata, Tensor scale, Tensor zero_point, int64_t bn, int64_t bk,
                   DType dtype, int bits, std::optional<Granularity> act_granularity);

  // Int8Tensor.from_hp (symmetric, eps = f32 eps, f32 scale) for a [N, K] float weight.
  static std::shared_ptr<AffineInt8Weight> quantize_int8(const Tensor& w, const Granularity& g,
                                                         std::optional<Granularity> act_granularity);
  // IntxUnpackedToInt8Tensor.from_hp (+ _adjust_scale_dtype when scale_dtype differs from w's dtype).
  static std::shared_ptr<AffineInt8Weight> quantize_intx(const Tensor& w, int bits, const Granularity& g,
                                                         MappingType mapping, std::optional<DType> scale_dtype);

  std::string scheme() const override;
  std::string tensor_class() const override;
  nlohmann::json tensor_attributes() const override;
  std::vector<std::pair<std::string, Tensor>> tensor_data() const override;
  void dequant_rows(int64_t n0, int64_t n1, DType out, float* dst) const override;
  // int8dq (activation quantization) has no tile linear: its CPU kernel is the int8 GEMM
  // (backend/cpu/quant/int8_dynamic_linear.h).
  bool has_tile_linear() const override { return !act_; }
  std::optional<quant::TileLinearPlan> tile_linear_plan(const Tensor& x, const Tensor& bias) const override;

  const Tensor& qdata() const { return qdata_; }
  const Tensor& scale() const { return scale_; }
  const Tensor& zero_point() const { return zero_point_; }
  int64_t block_rows() const { return bn_; }
  int64_t block_cols() const { return bk_; }
  const std::optional<Granularity>& act_granularity() const { return act_; }
  float scale_at(int64_t row, int64_t col) const { return scale_f_[size_t((row / bn_) * (k_ / bk_) + col / bk_)]; }
  int32_t zero_at(int64_t row, int64_t col) const { return zp_[size_t((row / bn_) * (k_ / bk_) + col / bk_)]; }

 private:
  Flavor flavor_;
  Tensor qdata_, scale_, zero_point_;
  int64_t bn_, bk_;
  int bits_;
  std::optional<Granularity> act_;
  std::vector<float> scale_f_;  // scale widened to f32 (exact), row-major [N/bn, K/bk]
  std::vector<int32_t> zp_;
};

// torchao's block size (bn, bk) of a granularity for a [N, K] weight; throws naming the shape when a
// group does not divide K.
std::pair<int64_t, int64_t> block_size_for(const Granularity& g, int64_t n, int64_t k, const char* ctx);

}  // namespace diffq::quant::torchao
