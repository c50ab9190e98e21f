// bitsandbytes LLM.int8() weights (Linear8bitLt / Int8Params), as bitsandbytes 0.50.2 computes them on
// the CPU:
//  * quantize = Int8Params._quantize: the weight cast to float16, then int8_vectorwise_quant: SCB =
//    per-row absmax (float32), q = round_half_even(w * (127 * (1 / SCB))) (torch's 127.0 / t is
//    t.reciprocal() * 127); an all-zero row gets SCB 0 and codes 0.
//  * dequantize = int8_vectorwise_dequant: (q * SCB) * 7.874015718698502e-3 in float32, then the dtype.
//  * file layout (Diffusers save_pretrained): "<L>.weight" int8 [O, I], "<L>.SCB" float32 [O],
//    "<L>.weight_format" uint8 scalar 0 ("row").
//  * linear, LLM.int8 (what an eval-mode Linear8bitLt runs on the CPU): x cast to float16; with
//    threshold t > 0 every element with |x| >= t (compared in float16) is an outlier, zeroed before the
//    row absmax; the int8 activations of every column that holds an outlier are zeroed (when x has more
//    than one row); main = (int32 (q_x q_w^T) * (absmax_x[m] * SCB[n])) * 6.200124e-05 + bias in float32,
//    rounded to x's dtype; then + x[:, outlier cols] @ dequantized weight columns (int8_vectorwise_dequant,
//    rounded to x's dtype) in x's dtype. The bias is cast to x's dtype first (Linear8bitLt does).
//    bitsandbytes' own int32 product is a float32 matmul of the codes on CPUs without AVX-512; diffq's is
//    the same float32 GEMM (exact while the partial sums stay below 2^24): the CPU's linear_q kernel,
//    backend/cpu/quant/bnb_int8_linear.h.
//  * linear, dequantized (Int8LinearMode::dequantize_fp, bitsandbytes' CPU path in training mode,
//    MatMul8bitFp): w = (q cast to x's dtype) * (SCB * (1/127)), then x w^T + b in x's dtype.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "diffq/tensor.h"
#include "io/safetensors.h"
#include "quant/quantized_weight.h"

namespace diffq::quant {

enum class Int8LinearMode : uint8_t { llm_int8, dequantize_fp };

class Bnb8bitWeight : public QuantizedWeight {
 public:
  // cb int8 [O, I], scb float32 [O]. Throws, naming `name`, on a shape or dtype mismatch.
  Bnb8bitWeight(Tensor cb, Tensor scb, double threshold = 6.0, std::string name = "weight");

  // Int8Params quantization of a dense [O, I] weight (any float dtype; it goes through float16).
  static std::shared_ptr<Bnb8bitWeight> quantize(const Tensor& w, double threshold = 6.0,
                                                 std::string_view name = "weight");
  // "<module>.weight", "<module>.SCB", optional "<module>.weight_format" (must be 0 / "row", as
  // bitsandbytes' maybe_rearrange_weight requires). Errors name the key.
  static std::shared_ptr<Bnb8bitWeight> load(const io::StateDict& sd, const std::string& module,
                                             double threshold = 6.0);
  void save(io::NamedTensors& out, const std::string& module) const;

  std::string scheme() const override { return "bnb_int8"; }
  Shape shape() const override { return cb_.shape(); }
  Tensor dequantize(DType dtype) const override;  // int8_vectorwise_dequant (float32) .to(dtype)
  std::vector<Tensor> storage_tensors() const override { return {cb_, scb_}; }
  bool has_tile_linear() const override { return mode_ != Int8LinearMode::llm_int8; }
  std::optional<quant::TileLinearPlan> tile_linear_plan(const Tensor& x, const Tensor& bias) const override;

  // Rows [n0, n1) of the dequantized weight in float32 (int8_vectorwise_dequant's values).
  void dequant_rows(int64_t n0, int64_t n1, float* dst) const;

  const Tensor& cb() const { return cb_; }
  const Tensor& scb() const { return scb_; }
  double threshold() const { return threshold_; }
  void set_threshold(double t) { threshold_ = t; }
  Int8LinearMode mode() const { return mode_; }
  void set_mode(Int8LinearMode m) { mode_ = m; }
  // Throws, naming the weight, unless x is [..., in_features] float32/bfloat16/float16 and the bias has
  // out_features elements (or is undefined).
  void check_input(const Tensor& x, const Tensor& bias) const;

 private:
  Tensor cb_, scb_;
  double threshold_;
  Int8LinearMode mode_ = Int8LinearMode::llm_int8;
  std::string name_;
};

namespace bnb {
inline constexpr float kInv127 = float(7.874015718698502e-3);  // the literal bitsandbytes multiplies by
inline constexpr float kInv127Sq = float(6.200124e-05);         // int8_mm_dequant's 1 / (127 * 127)

// int8_vectorwise_quant of float16 values held as float (rows x cols, row-major): codes and row absmax.
// With threshold > 0, |a| >= threshold (rounded to float16) is an outlier: zeroed before the absmax and
// its column zeroed in the codes when rows > 1; `outlier_cols` receives the columns (ascending).
void int8_vectorwise_quant(const float* a16, int64_t rows, int64_t cols, double threshold, int8_t* codes,
                           float* row_stats, std::vector<int64_t>* outlier_cols);
}  // namespace bnb

}  // namespace diffq::quant
