// linear_q on the CPU, per scheme (ops/linear_q.h), each kernel reading its scheme's weight through the
// weight class's accessors:
//   "*"                        the weight's tile linear plan with the CPU's row dequantizers (tile_linear.h,
//                              dequant_rows.h), rounded once to x's dtype; a weight without a plan is
//                              dequantized to x's dtype and runs the dense linear op;
//   torchao_int8dq             the dynamic int8 linear (int8_dynamic_linear.h), linear_q_act's activation
//                              applied block by block after its epilogue;
//   bnb_int8                   LLM.int8 (bnb_int8_linear.h), or "*" in the dequantize_fp mode;
//   nunchaku_svdq_w4a4_int4    the W4A4 int8-GEMM linear (nunchaku_linear.h).
// The same values part by part, for compile's GEMM prologue: linear_q_parts.h.
#include "backend/cpu/kernels.h"
#include "backend/cpu/quant/bnb_int8_linear.h"
#include "backend/cpu/quant/dequant_rows.h"
#include "backend/cpu/quant/int8_dynamic_linear.h"
#include "backend/cpu/quant/nunchaku_linear.h"
#include "backend/cpu/quant/tile_linear.h"
#include "diffq/error.h"
#include "ops/linear_q.h"
#include "ops/ops.h"
#include "quant/bnb/bnb_int8.h"
#include "quant/nunchaku/nunchaku.h"
#include "quant/torchao/affine_int8_weight.h"

namespace diffq::backend::cpu {

namespace {

// The weight of a call as its scheme's class, checked (a scheme name registered for another class is
// refused rather than misread).
template <class W>
const W& weight_of(const OpCall& c, const char* scheme) {
  const auto* w = dynamic_cast<const W*>(c.attrs.packed);
  check(w != nullptr, "linear_q", "cpu: the ", scheme, " kernel was given a ", c.attrs.packed->scheme(), " weight");
  return *w;
}

Tensor bias_of(const OpCall& c) { return c.inputs.size() > 1 ? c.inputs[1] : Tensor(); }

Tensor tiled_or_dense(const QuantizedWeight& w, const Tensor& x, const Tensor& bias) {
  if (!w.has_tile_linear()) return ops::linear(x, w.dequantize(x.dtype()).to(x.device()), bias);
  const std::optional<quant::TileLinearPlan> plan = cpu_tile_linear_plan(w, x, bias);
  check(plan.has_value(), "quant.linear", w.scheme(), " has no tile linear plan");
  const Tensor y = run_tile_linear(*plan);
  return y.dtype() == x.dtype() ? y : y.to(x.dtype());
}

void any_scheme(const OpCall& c, Tensor& out) {
  out = tiled_or_dense(weight_of<QuantizedWeight>(c, "generic"), c.inputs[0], bias_of(c));
}

void torchao_int8dq(const OpCall& c, Tensor& out) {
  const auto& w = weight_of<quant::torchao::AffineInt8Weight>(c, "torchao_int8dq");
  check(w.act_granularity().has_value(), "linear_q", "cpu: the torchao_int8dq kernel was given a ", w.scheme(),
        " weight");
  out = int8_dynamic_linear(c.inputs[0], bias_of(c), w, ops::linear_q_activation(c));
}

void bnb_int8(const OpCall& c, Tensor& out) {
  const auto& w = weight_of<quant::Bnb8bitWeight>(c, "bnb_int8");
  const Tensor& x = c.inputs[0];
  const Tensor bias = bias_of(c);
  out = w.mode() == quant::Int8LinearMode::llm_int8 ? llm_int8_linear(w, x, bias) : tiled_or_dense(w, x, bias);
}

void nunchaku_svdq(const OpCall& c, Tensor& out) {
  out = svdq_w4a4_linear(weight_of<quant::nunchaku::SvdqW4A4Weight>(c, "nunchaku_svdq_w4a4_int4"), c.inputs[0],
                         bias_of(c));
}

}  // namespace

void register_linear_q_kernels() {
  ops::register_linear_q_kernel(DeviceKind::cpu, "*", any_scheme);
  ops::register_linear_q_kernel(DeviceKind::cpu, "torchao_int8dq", torchao_int8dq, /*applies_activation=*/true);
  ops::register_linear_q_kernel(DeviceKind::cpu, "bnb_int8", bnb_int8);
  ops::register_linear_q_kernel(DeviceKind::cpu, "nunchaku_svdq_w4a4_int4", nunchaku_svdq);
}

}  // namespace diffq::backend::cpu
