// A weight stored in a quantization scheme's packed form, as the op layer sees it: what the `linear_q` op
// (activation x packed weight) needs to dispatch (the scheme names the kernel family, per device) and to
// check its call (shape, where its packed tensors live), plus the scheme's reference dequantization for the
// op tables' f64 reference. quant::QuantizedWeight implements it; the formats and their reference math live
// in src/quant, the kernels that compute with them in the backends (ops/linear_q.h).
#pragma once

#include <string>
#include <vector>

#include "diffq/tensor.h"

namespace diffq::ops {

class PackedWeight {
 public:
  virtual ~PackedWeight() = default;
  virtual std::string scheme() const = 0;            // e.g. "bnb_nf4", "torchao_int8wo", "gguf_q4_0"
  virtual Shape shape() const = 0;                   // logical [N, K] (out_features, in_features)
  virtual Tensor dequantize(DType dtype) const = 0;  // reference path, bit-exact with the library
  // The packed tensors (codes, scales, ...), on the device the weight lives on.
  virtual std::vector<Tensor> storage_tensors() const = 0;
};

}  // namespace diffq::ops
