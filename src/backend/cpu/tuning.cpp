// The calling thread's kernel tuning (see tuning.h).
#include "backend/cpu/tuning.h"

#include <cstdlib>
#include <string>

#include "backend/cpu/onednn_gemm.h"
#include "diffq/error.h"

namespace diffq::backend::cpu {
namespace {

// Tuning{} with DIFFQ_GEMM_KERNEL (best, diffq, diffq-widen, openblas or onednn) applied, read once.
const Tuning& defaults() {
  static const Tuning t = [] {
    Tuning d;
    if (const char* env = std::getenv("DIFFQ_GEMM_KERNEL"); env && *env) {
      const std::string v = env;
      if (v == "diffq")
        d.gemm_kernel = GemmKernel::diffq;
      else if (v == "diffq-widen")
        d.gemm_kernel = GemmKernel::diffq_widen;
      else if (v == "openblas")
        d.gemm_kernel = GemmKernel::openblas;
      else if (v == "onednn") {
        check(onednn_bf16_available() || onednn_int8_available() || onednn_f32_impl().rfind("unavailable", 0) != 0,
              "tuning", "DIFFQ_GEMM_KERNEL=onednn: f32 ", onednn_f32_impl(), "; bf16 ", onednn_bf16_impl(), "; int8 ",
              onednn_int8_impl());
        d.gemm_kernel = GemmKernel::onednn;
      } else
        check(v == "best", "tuning", "DIFFQ_GEMM_KERNEL='", v, "' is not one of best, diffq, diffq-widen, openblas, onednn");
    }
    return d;
  }();
  return t;
}

thread_local const Tuning* t_current = nullptr;

}  // namespace

const Tuning& current_tuning() { return t_current ? *t_current : defaults(); }

ScopedTuning::ScopedTuning(const Tuning& t) : prev_(t_current), mine_(t) { t_current = &mine_; }

ScopedTuning::~ScopedTuning() { t_current = prev_; }

}  // namespace diffq::backend::cpu
