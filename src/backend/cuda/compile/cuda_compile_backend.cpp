// The CUDA compile backend (compile/compile_backend.h): it offers elementwise fusion (`fuse`: a chain
// of elementwise ops as one kernel, compile/fused_kernel.cu). The other passes (norm / GEMM prologues,
// RoPE fusion, concat elision, memory planning, in-place, autotune) decline on CUDA and those parts of
// a graph run op by op through the CUDA kernels, as PassStats::declined says.
#include "backend/cuda/compile/cuda_compile_backend.h"

#include <nlohmann/json.hpp>

#include "backend/cuda/compile/fused_kernel.h"
#include "compile/compile_backend.h"
#include "diffq/error.h"

namespace diffq::backend::cuda {

namespace {

class CudaCompileBackend final : public compile::CompileBackend {
 public:
  bool offers(std::string_view pass) const override { return pass == "fuse"; }

  void run_fused(const compile::FusedProgram& p, const std::vector<Tensor>& leaves, Tensor& out,
                 const compile::QuantizedLinear*) const override {
    cuda::run_fused(p, leaves, out);
  }
  void run_norm_rope(const compile::NormRope&, const std::vector<Tensor>&, Tensor&) const override { not_offered("fuse_rope"); }
  void run_linear_strided(const std::vector<Tensor>&, Tensor&) const override { not_offered("elide_concat"); }
  bool quantized_linear_in_parts(const ops::PackedWeight&) const override { return false; }
  std::vector<compile::KernelTuning> tuning_candidates(const compile::Node&, const ops::OpCall&) const override {
    return {};
  }
  std::shared_ptr<void> install(const compile::KernelTuning&) const override { return nullptr; }
  std::string processor_key() const override { not_offered("autotune"); }
  nlohmann::json tuning_to_json(const compile::KernelTuning&) const override { not_offered("autotune"); }
  compile::KernelTuning tuning_from_json(const nlohmann::json&, const std::string&) const override {
    not_offered("autotune");
  }

 private:
  [[noreturn]] static void not_offered(const char* pass) {
    fail("compile", "cuda's compile backend does not offer ", pass, " (the pass declines on CUDA)");
  }
};

}  // namespace

void register_compile_backend() {
  static const CudaCompileBackend backend;
  compile::register_compile_backend(DeviceKind::cuda, &backend);
}

}  // namespace diffq::backend::cuda
