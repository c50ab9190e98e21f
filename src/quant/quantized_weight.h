// A quantized Linear weight behind one interface (candle's QMatMul idea): the scheme's packed tensors,
// its logical [N, K] shape, a reference dequantization, and the linear it computes. Concrete schemes
// (bitsandbytes, torchao, GGUF, quanto) derive from this; the kernel is chosen by scheme and device.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "diffq/tensor.h"
#include "quant/dequant_linear.h"

namespace diffq::backend::cpu {
struct GemmParts;
}

namespace diffq {

class QuantizedWeight {
 public:
  virtual ~QuantizedWeight() = default;
  virtual std::string scheme() const = 0;              // e.g. "bnb_nf4", "torchao_int8wo", "gguf_q4_0"
  virtual Shape shape() const = 0;                     // logical [out_features, in_features]
  virtual Tensor dequantize(DType dtype) const = 0;    // reference path, bit-exact with the library
  // The packed tensors (codes, scales, ...): residency moves (offload) go through these.
  virtual std::vector<Tensor> storage_tensors() const = 0;
  // y = x @ W^T + b. Default: with a tile linear (below), run its plan (run_tile_linear) and round to x's
  // dtype; otherwise dequantize to x's dtype and run the dense linear op. Schemes with another kernel
  // override it.
  virtual Tensor linear(const Tensor& x, const Tensor& bias) const;
  // Schemes whose CPU linear dequantizes W tile by tile into the f32 GEMM (dequant_linear.h) describe
  // that computation for x and bias here; linear() runs it and compile runs it part by part with the
  // consumer's epilogue ("dequantize inside the GEMM"). has_tile_linear() says, without an input,
  // whether tile_linear_plan gives a plan; others (integer GEMMs, LLM.int8) return none.
  virtual bool has_tile_linear() const { return false; }
  virtual std::optional<quant::TileLinearPlan> tile_linear_plan(const Tensor& x, const Tensor& bias) const;
  // linear(x, bias) delivered part by part (compile's GEMM prologue: the consumer's program runs on each
  // part right after it is computed): parts.end gets f32 values already holding linear()'s rounding to
  // x's dtype. Default: the tile plan's parts; schemes with another CPU kernel that can deliver parts
  // (torchao int8dq) override both. has_linear_parts() says whether linear_parts works.
  virtual bool has_linear_parts() const { return has_tile_linear(); }
  virtual void linear_parts(const Tensor& x, const Tensor& bias, const backend::cpu::GemmParts& parts) const;

  size_t nbytes() const;  // bytes of the packed storage
};

}  // namespace diffq
