#include "backend/cpu/quant/linear_q_parts.h"

#include "backend/cpu/linear.h"
#include "backend/cpu/packed_linear_weight.h"
#include "backend/cpu/quant/dequant_rows.h"
#include "backend/cpu/quant/int8_dynamic_linear.h"
#include "backend/cpu/quant/tile_linear.h"
#include "diffq/error.h"
#include "quant/torchao/affine_int8_weight.h"

namespace diffq::backend::cpu {

namespace {

// An int8dq weight (dynamic int8 activations: the int8 GEMM's own parts), else nullptr.
const quant::torchao::AffineInt8Weight* int8dq_of(const ops::PackedWeight& w) {
  const auto* a = dynamic_cast<const quant::torchao::AffineInt8Weight*>(&w);
  return a && a->act_granularity().has_value() ? a : nullptr;
}

}  // namespace

bool linear_q_has_parts(const ops::PackedWeight& w) {
  if (int8dq_of(w) || dynamic_cast<const PackedBf16Weight*>(&w)) return true;
  const auto* q = dynamic_cast<const QuantizedWeight*>(&w);
  return q != nullptr && q->has_tile_linear();
}

void linear_q_parts(const ops::PackedWeight& w, const Tensor& x, const Tensor& bias, const GemmParts& parts) {
  if (const auto* a = int8dq_of(w)) return int8_dynamic_linear_parts(x, bias, *a, parts);
  if (const auto* p = dynamic_cast<const PackedBf16Weight*>(&w)) {  // dense bf16 packed for oneDNN
    const Shape s = p->shape();
    if (!linear_bf16_packed_parts(x, p->data(), s[0], s[1], bias, parts))
      linear_parts(x, p->dequantize(DType::bf16), bias, parts);  // not bf16 rows: the dense weight, unpacked
    return;
  }
  const auto* q = dynamic_cast<const QuantizedWeight*>(&w);
  std::optional<quant::TileLinearPlan> plan;
  if (q) plan = cpu_tile_linear_plan(*q, x, bias);
  check(plan.has_value(), "quant.linear", w.scheme(), " cannot deliver its linear in parts");
  tile_linear_parts(*plan, parts, /*round=*/true);
}

}  // namespace diffq::backend::cpu
