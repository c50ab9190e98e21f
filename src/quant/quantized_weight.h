// A quantized Linear weight behind one interface (candle's QMatMul idea): the scheme's packed tensors,
// its logical [N, K] shape, a reference dequantization, and the linear it computes. Concrete schemes
// (bitsandbytes, torchao, GGUF, quanto) derive from this; the kernel is chosen by scheme and device.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "diffq/tensor.h"
#include "ops/packed_weight.h"
#include "quant/dequant_linear.h"

namespace diffq::backend::cpu {
struct GemmParts;
}

namespace diffq {

class QuantizedWeight : public ops::PackedWeight {
 public:
  ~QuantizedWeight() override = default;
  // scheme(), shape(), dequantize(dtype) (the reference path, bit-exact with the library) and
  // storage_tensors() (the packed tensors: residency moves go through these): ops::PackedWeight.

  // y = x @ W^T + b through the linear_q op: the kernel of this scheme on x's device (ops/linear_q.h).
  Tensor linear(const Tensor& x, const Tensor& bias) const;
  // The CPU backend's linear_q kernel: the scheme's host computation. Default: with a tile linear
  // (below), run its plan (run_tile_linear) and round to x's dtype; otherwise dequantize to x's dtype and
  // run the dense linear op. Schemes with another CPU kernel override it.
  Tensor cpu_linear(const Tensor& x, const Tensor& bias) const override;
  // Schemes whose CPU linear dequantizes W tile by tile into the f32 GEMM (dequant_linear.h) describe
  // that computation for x and bias here; cpu_linear() runs it and compile runs it part by part with the
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
