// linear_q on the CPU: every scheme computes through its own host code (ops::PackedWeight::cpu_linear:
// the tile-dequantizing GEMM driver, the integer GEMMs, LLM.int8, ...), registered for all schemes ("*").
#include "backend/cpu/kernels.h"
#include "ops/linear_q.h"

namespace diffq::backend::cpu {

namespace {

void linear_q(const OpCall& c, Tensor& out) {
  out = c.attrs.packed->cpu_linear(c.inputs[0], c.inputs.size() > 1 ? c.inputs[1] : Tensor());
}

}  // namespace

void register_linear_q_kernels() { ops::register_linear_q_kernel(DeviceKind::cpu, "*", linear_q); }

}  // namespace diffq::backend::cpu
