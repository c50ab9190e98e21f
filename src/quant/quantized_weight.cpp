#include "quant/quantized_weight.h"

#include "ops/linear_q.h"

namespace diffq {

Tensor QuantizedWeight::linear(const Tensor& x, const Tensor& bias) const { return ops::linear_q(x, *this, bias); }

std::optional<quant::TileLinearPlan> QuantizedWeight::tile_linear_plan(const Tensor&, const Tensor&) const {
  return std::nullopt;
}

size_t QuantizedWeight::nbytes() const {
  size_t n = 0;
  for (const Tensor& t : storage_tensors()) n += t.nbytes();
  return n;
}

}  // namespace diffq
