// Nunchaku Lite pre-quantized checkpoints (Diffusers' NunchakuLiteQuantizationConfig, quant_method
// "nunchaku_lite"): SVDQuant W4A4 Linears (int4 weights AND int4 activations, plus a low-rank branch and
// activation smoothing) and AWQ W4A16 Linears (int4 weights, unquantized activations). Diffusers runs
// them only with the nunchaku CUDA kernels; diffq runs the same math on the CPU (layouts in
// nunchaku_layout.h).
//
// SVDQ W4A4 forward of x [M, K] (float32 compute):
//   xs = x / smooth_factor
//   per token t and group g of 64 inputs: ascale[t, g] = max|xs[t, g*64:(g+1)*64]| * (1/7)
//     q[t, k] = clamp(round_half_even(xs[t, k] * (1 / ascale[t, g])), -8, 7)   (0 when ascale is 0)
//   y[t, n] = sum_g float(sum_{k in g} q[t, k] * code[n, k]) * ascale[t, g] * wscale[g, n]
//           + sum_r (sum_k x[t, k] * proj_down[k, r]) * proj_up[n, r] + bias[n]
// i.e. the kernels' quantize_w4a4_act_fuse_lora + gemm_w4a4 (there the activation scale is stored in
// 16 bits and the low-rank activations rounded to 16 bits: diffq keeps float32, as the pipeline's
// float32 compute). The activations ARE quantized: never a silent dense dequantization.
// The bias of a packed-layout Linear is in the kernel's permuted order (it is the Linear's "bias" key);
// linear() reads its bias argument in the layout of the weight.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "diffq/tensor.h"
#include "io/safetensors.h"
#include "quant/quantized_weight.h"

namespace diffq::quant::nunchaku {

struct NunchakuSection {
  std::string precision;  // "int4" (diffq); "nvfp4" is refused
  int64_t group_size = 64;
  int64_t rank = 0;       // svdq_w4a4 only
  std::vector<std::string> targets;
};

struct NunchakuLiteConfig {
  std::string compute_dtype = "bfloat16";
  std::optional<NunchakuSection> svdq_w4a4, awq_w4a16;

  // Diffusers' post_init checks (same messages), context "nunchaku.config"; nvfp4 is refused by name.
  static NunchakuLiteConfig from_json(const nlohmann::json& qc, const std::string& source = "quantization_config");
  nlohmann::json to_json() const;
  std::string scheme() const;  // "svdq_w4a4_int4_r32+awq_w4a16_int4", ...
  enum class Kind { none, svdq, awq };
  Kind kind_of(const std::string& module) const;
};

class SvdqW4A4Weight : public QuantizedWeight {
 public:
  // Reads "<module>.qweight", ".wscales", ".smooth_factor", ".proj_down", ".proj_up" (layout by shape,
  // nunchaku_layout.h); `shape` is the Linear's [N, K]. Errors name the key and what was expected.
  static std::shared_ptr<SvdqW4A4Weight> load(const io::StateDict& sd, const std::string& module, const Shape& shape,
                                              int64_t rank, int64_t group_size, std::vector<std::string>& consumed);
  // From logical tensors: codes int8 [N, K] (-8..7), wscales [K/64, N], smooth [K], down [K, R], up [N, R].
  SvdqW4A4Weight(Tensor codes, Tensor wscales, Tensor smooth, Tensor down, Tensor up, bool packed, std::string name);

  std::string scheme() const override { return "nunchaku_svdq_w4a4_int4"; }
  Shape shape() const override { return {n_, k_}; }
  // The dense weight the layer stands for without activation quantization: code * wscale / smooth +
  // proj_up @ proj_down^T (float32, then dtype).
  Tensor dequantize(DType dtype) const override;
  // The residual int4 weight as the library dequantizes it: code * wscale (float32) [N, K].
  Tensor dequantize_residual() const;
  std::vector<Tensor> storage_tensors() const override { return {codes_, wscales_, smooth_, down_, up_}; }
  // The forward computed by plain loops: the reference of the CPU's kernel (int8 GEMMs per group,
  // backend/cpu/quant/nunchaku_linear.h) and the tests' oracle for linear().
  Tensor linear_reference(const Tensor& x, const Tensor& bias) const;
  // The bias argument in logical order (un-permutes a packed-layout bias), float32 [N].
  std::vector<float> logical_bias(const Tensor& bias) const;
  // Throws, naming the weight, unless x is [..., in_features].
  void check_input(const Tensor& x) const;
  // x [m, K] (f32) smoothed and quantized: codes q [m, K], ascale [m, K/64] (the forward's first step).
  void quantize_activations(const float* x, int64_t m, int8_t* q, float* ascale) const;

  bool packed() const { return packed_; }
  int64_t rank() const { return r_; }
  const Tensor& codes() const { return codes_; }      // int8 [N, K]
  const Tensor& wscales() const { return wscales_; }  // f32 [K/64, N]
  const Tensor& down() const { return down_; }        // f32 [R, K] (proj_down^T)
  const Tensor& up() const { return up_; }            // f32 [N, R]

 private:
  Tensor codes_, wscales_, smooth_, down_, up_;  // logical: int8 [N,K], f32 [G,N], [K], [R,K] (down^T), [N,R]
  bool packed_ = false;
  int64_t n_ = 0, k_ = 0, r_ = 0, g_ = 0;
  std::string name_;
};

class AwqW4A16Weight : public QuantizedWeight {
 public:
  static std::shared_ptr<AwqW4A16Weight> load(const io::StateDict& sd, const std::string& module, const Shape& shape,
                                              int64_t group_size, std::vector<std::string>& consumed);
  AwqW4A16Weight(Tensor qweight, Tensor wscales, Tensor wzeros, Shape shape, std::string name);

  std::string scheme() const override { return "nunchaku_awq_w4a16_int4"; }
  Shape shape() const override { return {n_, k_}; }
  Tensor dequantize(DType dtype) const override;  // code * wscale + wzero in float32, then dtype
  std::vector<Tensor> storage_tensors() const override { return {qweight_, wscales_, wzeros_}; }

 private:
  Tensor qweight_, wscales_, wzeros_;  // int32 [N/4, K/2], f32 [K/64, N] x2
  int64_t n_ = 0, k_ = 0;
  std::string name_;
};

}  // namespace diffq::quant::nunchaku
