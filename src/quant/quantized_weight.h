// A quantized Linear weight behind one interface (candle's QMatMul idea): the scheme's packed tensors,
// its logical [N, K] shape, a reference dequantization, and the linear it computes. Concrete schemes
// (bitsandbytes, torchao, GGUF, quanto, ...) derive from this and hold formats and reference math only:
// the kernels that compute with them are the backends' linear_q kernels, chosen by scheme and device
// (ops/linear_q.h; each backend keeps them in its quant/ folder).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "diffq/tensor.h"
#include "ops/packed_weight.h"
#include "quant/tile_linear_plan.h"

namespace diffq {

class QuantizedWeight : public ops::PackedWeight {
 public:
  ~QuantizedWeight() override = default;
  // scheme(), shape(), dequantize(dtype) (the reference path, bit-exact with the library) and
  // storage_tensors() (the packed tensors: residency moves go through these): ops::PackedWeight.

  // y = x @ W^T + b through the linear_q op: the kernel of this scheme on x's device (ops/linear_q.h).
  Tensor linear(const Tensor& x, const Tensor& bias) const;
  // Schemes whose linear dequantizes W tile by tile into a float GEMM describe that computation for x and
  // bias here (quant/tile_linear_plan.h: the GEMM's input as the scheme converts it, the bias as it
  // rounds it, the reference row dequantizer); a backend runs it (and compile on the CPU, part by part
  // with the consumer's epilogue: "dequantize inside the GEMM"). has_tile_linear() says, without an
  // input, whether tile_linear_plan gives a plan; others (integer GEMMs, LLM.int8) return none.
  virtual bool has_tile_linear() const { return false; }
  virtual std::optional<quant::TileLinearPlan> tile_linear_plan(const Tensor& x, const Tensor& bias) const;

  size_t nbytes() const;  // bytes of the packed storage
};

}  // namespace diffq
