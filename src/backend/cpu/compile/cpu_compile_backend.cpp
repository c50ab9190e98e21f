#include "backend/cpu/compile/cpu_compile_backend.h"

#include <nlohmann/json.hpp>

#include "backend/cpu/compile/autotune_candidates.h"
#include "backend/cpu/compile/fused_kernel.h"
#include "backend/cpu/compile/placed_linear.h"
#include "backend/cpu/compile/tuning_json.h"
#include "backend/cpu/quant/linear_q_parts.h"
#include "diffq/error.h"
#include "diffq/runtime.h"

namespace diffq::backend::cpu {

namespace {

class CpuCompileBackend final : public compile::CompileBackend {
 public:
  void run_fused(const compile::FusedProgram& p, const std::vector<Tensor>& leaves, Tensor& out,
                 const compile::QuantizedLinear* qlinear) const override {
    cpu::run_fused(p, leaves, out, qlinear);
  }
  void run_norm_rope(const compile::NormRope& p, const std::vector<Tensor>& leaves, Tensor& out) const override {
    cpu::run_norm_rope(p, leaves, out);
  }
  void run_linear_strided(const std::vector<Tensor>& inputs, Tensor& out) const override {
    cpu::run_linear_strided(inputs, out);
  }
  bool quantized_linear_in_parts(const ops::PackedWeight& w) const override { return linear_q_has_parts(w); }

  std::vector<compile::KernelTuning> tuning_candidates(const compile::Node& n, const ops::OpCall& call) const override {
    std::vector<compile::KernelTuning> out;
    for (const Tuning& t : autotune_candidates(n, call, num_threads())) out.push_back(kernel_tuning(t));
    return out;
  }
  std::shared_ptr<void> install(const compile::KernelTuning& t) const override {
    return std::make_shared<ScopedTuning>(cpu_tuning(t));
  }
  std::string processor_key() const override { return cpu::processor_key(); }
  nlohmann::json tuning_to_json(const compile::KernelTuning& t) const override {
    return cpu::tuning_to_json(cpu_tuning(t));
  }
  compile::KernelTuning tuning_from_json(const nlohmann::json& j, const std::string& where) const override {
    return kernel_tuning(cpu::tuning_from_json(j, where));
  }
};

}  // namespace

compile::KernelTuning kernel_tuning(const Tuning& t) {
  return t == Tuning{} ? compile::KernelTuning{} : compile::KernelTuning::of(t);
}

Tuning cpu_tuning(const compile::KernelTuning& t) {
  if (t.is_default()) return Tuning{};
  const Tuning* c = t.as<Tuning>();
  check(c != nullptr, "compile", "a kernel tuning of another device was given to the cpu");
  return *c;
}

void register_compile_backend() {
  static const CpuCompileBackend backend;
  compile::register_compile_backend(DeviceKind::cpu, &backend);
}

}  // namespace diffq::backend::cpu
