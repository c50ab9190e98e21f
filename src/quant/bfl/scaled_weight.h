// The common base of the pre-quantized "codes times scales" weights of BFL single files (fp8r, nvfp4) and
// ModelOpt exports (FP8, FP8 per channel, INT8, INT4 AWQ, NVFP4): a scheme supplies the float32
// dequantization of a range of rows (the library's own float32 math, bit for bit); this base turns it into
// dequantize() and the tiled CPU linear (TileLinearPlan), so compile, offload and the matrix-engine kernels
// see one more tile-linear scheme.
//
// The linear is what Diffusers runs on a CPU for these layouts (BFLFP8RLinear / BFLNVFP4Linear without
// their GPU kernels): W is dequantized in float32, rounded to the compute dtype (the input's), and
// y = x' @ W^T + bias with x' = x * pre_quant_scale where the file has one (ModelOpt's AWQ / SmoothQuant
// input smoothing, folded out of W at export). Activations are NOT quantized: `input_scale` (the
// calibrated static activation scale of the W8A8 / W4A4 layouts) is read, kept and reported, and is
// applied by no CPU reference; see docs/quantization.md.
#pragma once

#include <optional>
#include <string>

#include "quant/quantized_weight.h"

namespace diffq::quant {

class ScaledWeight : public QuantizedWeight {
 public:
  std::string scheme() const override { return scheme_; }
  Shape shape() const override { return {n_, k_}; }
  // Rows [n0, n1) of W in float32 (K per row), as the library dequantizes. Thread-safe.
  virtual void dequant_rows_f32(int64_t n0, int64_t n1, float* dst) const = 0;
  Tensor dequantize(DType dtype) const override;  // float32 rows rounded to `dtype`
  bool has_tile_linear() const override { return true; }
  std::optional<TileLinearPlan> tile_linear_plan(const Tensor& x, const Tensor& bias) const override;
  std::vector<Tensor> storage_tensors() const override;

  const Tensor& input_scale() const { return input_scale_; }          // undefined when the file has none
  const Tensor& pre_quant_scale() const { return pre_quant_scale_; }  // [K] f32, undefined when none
  void set_input_scale(Tensor s) { input_scale_ = std::move(s); }
  void set_pre_quant_scale(const Tensor& s, const std::string& what);

 protected:
  ScaledWeight(int64_t n, int64_t k, std::string scheme) : n_(n), k_(k), scheme_(std::move(scheme)) {}
  virtual std::vector<Tensor> packed_tensors() const = 0;
  int64_t n_, k_;
  std::string scheme_;
  Tensor input_scale_, pre_quant_scale_;
};

}  // namespace diffq::quant
