#include "quant/quantized_weight.h"

#include "diffq/error.h"
#include "ops/linear_q.h"
#include "ops/ops.h"

namespace diffq {

Tensor QuantizedWeight::linear(const Tensor& x, const Tensor& bias) const { return ops::linear_q(x, *this, bias); }

Tensor QuantizedWeight::cpu_linear(const Tensor& x, const Tensor& bias) const {
  if (!has_tile_linear()) return ops::linear(x, dequantize(x.dtype()).to(x.device()), bias);
  const std::optional<quant::TileLinearPlan> plan = tile_linear_plan(x, bias);
  check(plan.has_value(), "quant.linear", scheme(), " has no tile linear plan");
  const Tensor y = quant::run_tile_linear(*plan);
  return y.dtype() == x.dtype() ? y : y.to(x.dtype());
}

std::optional<quant::TileLinearPlan> QuantizedWeight::tile_linear_plan(const Tensor&, const Tensor&) const {
  return std::nullopt;
}

void QuantizedWeight::linear_parts(const Tensor& x, const Tensor& bias, const backend::cpu::GemmParts& parts) const {
  const std::optional<quant::TileLinearPlan> plan = tile_linear_plan(x, bias);
  check(plan.has_value(), "quant.linear", scheme(), " cannot deliver its linear in parts");
  quant::tile_linear_parts(*plan, parts, /*round=*/true);
}

size_t QuantizedWeight::nbytes() const {
  size_t n = 0;
  for (const Tensor& t : storage_tensors()) n += t.nbytes();
  return n;
}

}  // namespace diffq
