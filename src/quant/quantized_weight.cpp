#include "quant/quantized_weight.h"

#include "ops/ops.h"

namespace diffq {

Tensor QuantizedWeight::linear(const Tensor& x, const Tensor& bias) const {
  return ops::linear(x, dequantize(x.dtype()).to(x.device()), bias);
}

size_t QuantizedWeight::nbytes() const {
  size_t n = 0;
  for (const Tensor& t : storage_tensors()) n += t.nbytes();
  return n;
}

}  // namespace diffq
