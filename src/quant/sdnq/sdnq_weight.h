// An SDNQ-quantized Linear weight (sdnq 0.2.8, quantizer.sdnq_quantize_layer_weight without SVD,
// Hadamard, codebooks, double-quantized scales or quantized matmul). The weight [N, K] is split into
// G groups of g = K / G columns per row (G = 1: row-wise; a single group for the whole tensor:
// tensor-wise), every group with its scale (and, for unsigned dtypes, zero point) in float32 (or the
// weight dtype when dequantize_fp32 is off):
//   signed (int*, float8):  scale = amax|w| / max,            q = clamp(round(w / scale), min, max)
//   unsigned (uint*):       scale = (amax - amin) / max, zp = amin, q = clamp(round((w - zp) / scale), 0, max)
// (float8 codes: w / scale with NaN -> 0, clamped to +-max, cast round-to-nearest-even; round is
// half-to-even; every op one float32 rounding, as torch). Dequantized: q * scale (signed) or
// zp + q * scale (unsigned: torch.addcmul as sdnq's torch.compile'd dequantizer runs it on the CPU, the
// product and the sum each rounded), in the scale's dtype, then rounded to the compute dtype.
// Files (save_pretrained of an SDNQ model): "<L>.weight" (int8 / uint8 / float8 [N, K] or [N, G, g];
// packed dtypes: uint8 [N*K*bits/8]), "<L>.scale" ([N, 1], [N, G, 1] or [1, 1]), "<L>.zero_point"
// (unsigned dtypes, same shape as scale).
#pragma once

#include <memory>
#include <string>

#include "io/safetensors.h"
#include "quant/quantized_weight.h"
#include "quant/sdnq/sdnq_dtypes.h"

namespace diffq::quant::sdnq {

// The group size sdnq uses for a Linear of in_features K: group_size 0 picks 2^(2 + bits); a size that
// does not divide K is lowered to K / G for the largest G that divides K; >= K (or no divisor) is
// row-wise (-1). -1: row-wise; -2: tensor-wise. Returns the number of groups per row, or 0 for
// tensor-wise.
int64_t sdnq_groups_per_row(int64_t group_size, int64_t K, const SdnqDtype& d);

class SdnqWeight final : public QuantizedWeight {
 public:
  // weight: the file's codes (see above); scale/zero_point: [N, 1], [N, G, 1] or [1, 1].
  SdnqWeight(const SdnqDtype& dtype, Tensor weight, Tensor scale, Tensor zero_point, Shape shape);

  // sdnq_quantize_layer_weight for a float [N, K] weight. `group_size` as the config's; `scale_dtype`:
  // f32 (dequantize_fp32) or the weight's dtype.
  static std::shared_ptr<SdnqWeight> quantize(const Tensor& w, const SdnqDtype& dtype, int64_t group_size,
                                              DType scale_dtype);
  // "<module>.weight/.scale/.zero_point" from a state dict; null when "<module>.scale" is absent.
  static std::shared_ptr<SdnqWeight> load(const io::StateDict& sd, const std::string& module, const Shape& shape,
                                          const SdnqDtype& dtype, std::vector<std::string>& consumed);
  void save(io::StateDict& out, const std::string& module) const;

  std::string scheme() const override { return std::string("sdnq_") + d_.name; }
  Shape shape() const override { return {n_, k_}; }
  Tensor dequantize(DType dtype) const override;
  std::vector<Tensor> storage_tensors() const override;
  bool has_tile_linear() const override { return true; }
  std::optional<quant::TileLinearPlan> tile_linear_plan(const Tensor& x, const Tensor& bias) const override;

  // Rows [n0, n1) dequantized as sdnq does, rounded to `out`, widened to f32 (K per row). Thread-safe.
  void dequant_rows(int64_t n0, int64_t n1, DType out, float* dst) const;
  const SdnqDtype& dtype_traits() const { return d_; }
  int64_t groups_per_row() const { return groups_; }  // 0: tensor-wise
  DType scale_dtype() const { return scale_.dtype(); }

 private:
  float code(int64_t i) const;  // code of flat element i, as a float (exact)
  const SdnqDtype& d_;
  Tensor weight_, scale_, zero_;
  int64_t n_, k_, groups_;
  std::vector<float> s_, z_;  // widened scale / zero point, [N * G] (or one value, tensor-wise)
};

}  // namespace diffq::quant::sdnq
