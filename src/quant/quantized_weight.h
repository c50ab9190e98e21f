// A quantized Linear weight behind one interface (candle's QMatMul idea): the scheme's packed tensors,
// its logical [N, K] shape, a reference dequantization, and the linear it computes. Concrete schemes
// (bitsandbytes, torchao, GGUF, quanto) derive from this; the kernel is chosen by scheme and device.
#pragma once

#include <string>
#include <vector>

#include "diffq/tensor.h"

namespace diffq {

class QuantizedWeight {
 public:
  virtual ~QuantizedWeight() = default;
  virtual std::string scheme() const = 0;              // e.g. "bnb_nf4", "torchao_int8wo", "gguf_q4_0"
  virtual Shape shape() const = 0;                     // logical [out_features, in_features]
  virtual Tensor dequantize(DType dtype) const = 0;    // reference path, bit-exact with the library
  // The packed tensors (codes, scales, ...): residency moves (offload) go through these.
  virtual std::vector<Tensor> storage_tensors() const = 0;
  // y = x @ W^T + b. Default: dequantize to x's dtype and run the dense linear op; schemes with a
  // fused kernel override it.
  virtual Tensor linear(const Tensor& x, const Tensor& bias) const;

  size_t nbytes() const;  // bytes of the packed storage
};

}  // namespace diffq
