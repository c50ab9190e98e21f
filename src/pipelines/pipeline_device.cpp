#include "pipelines/pipeline_device.h"

#include "backend/device_interface.h"
#include "diffq/pipeline.h"
#include "diffq/error.h"
#include "modules/module.h"
#include "ops/linear_q.h"
#include "ops/op.h"
#include "ops/ops.h"

namespace diffq {

namespace {
constexpr const char* kCtx = "pipeline";
}  // namespace

void check_execution_device(Device d) {
  backend::require_device(d, kCtx);
  if (d.is_cpu()) return;
  for (size_t i = 0; i < size_t(ops::OpKind::count_); ++i) {
    const auto k = static_cast<ops::OpKind>(i);
    if (k == ops::OpKind::linear_q) continue;  // per scheme: checked for each quantized weight when placed
    if (ops::runs_as_pieces_without_kernel(k)) continue;  // its pieces run there
    check(ops::find_kernel(k, d.kind) != nullptr, kCtx, "op ", ops::op_name(k), " has no kernel for ", d.str(),
          " in this build of diffq, so no pipeline can run there yet (run on the cpu)");
  }
}

void place_components(const offload::NamedModules& components, Device d) {
  if (!d.is_cpu()) {
    // A quantized linear runs through the linear_q kernel of its scheme on the device (ops/linear_q.h);
    // a scheme without one there is refused before anything is uploaded (dequantizing on the host every
    // step would be the silent fallback this refuses).
    for (const auto& [name, m] : components) {
      if (!m) continue;
      for (const auto& [pname, p] : m->named_parameters())
        if (p->is_quantized() && !ops::find_linear_q_kernel(d.kind, p->quantized().scheme()))
          fail(kCtx, name, ".", pname, ": the quantized linear (scheme ", p->quantized().scheme(),
               ") has no kernel for ", d.str(),
               " in this build of diffq; run the quantized pipeline on the cpu, or load it unquantized");
    }
  }
  for (const auto& [name, m] : components) {
    if (!m) continue;
    for (const auto& [pname, p] : m->named_parameters())
      if (p->defined()) p->move_to(d);
  }
}

}  // namespace diffq
