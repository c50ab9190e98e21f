// The calling thread's kernel tuning (see tuning.h).
#include "backend/cpu/tuning.h"

#include <cstdlib>
#include <string>

#include "backend/cpu/attention_amx.h"
#include "backend/cpu/attention_tiles.h"
#include "backend/cpu/bf16_dot_gemm.h"
#include "backend/cpu/onednn_conv.h"
#include "backend/cpu/onednn_gemm.h"
#include "diffq/error.h"

namespace diffq::backend::cpu {
namespace {

// Tuning{} with DIFFQ_GEMM_KERNEL (best, diffq, diffq-widen, openblas or onednn) and DIFFQ_CONV_KERNEL
// (best, onednn, implicit-gemm), DIFFQ_ATTENTION_KERNEL (best, onednn, bf16-dot, f32) and
// DIFFQ_PACK_WEIGHTS (best, on, off) and DIFFQ_IMAGE_LAYOUT (best, channels-first, channels-last) applied,
// read once.
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
    if (const char* env = std::getenv("DIFFQ_CONV_KERNEL"); env && *env) {
      const std::string v = env;
      if (v == "implicit-gemm") {
        d.conv_kernel = ConvKernel::implicit_gemm;
      } else if (v == "onednn") {
        check(onednn_conv_available(ConvElem::f32) || onednn_conv_available(ConvElem::bf16), "tuning",
              "DIFFQ_CONV_KERNEL=onednn: f32 ", onednn_conv_impl(ConvElem::f32), "; bf16 ",
              onednn_conv_impl(ConvElem::bf16));
        d.conv_kernel = ConvKernel::onednn;
      } else {
        check(v == "best", "tuning", "DIFFQ_CONV_KERNEL='", v, "' is not one of best, onednn, implicit-gemm");
      }
    }
    if (const char* env = std::getenv("DIFFQ_ATTENTION_KERNEL"); env && *env) {
      const std::string v = env;
      if (v == "onednn") {
        check(onednn_bf16_available() && bf16_dot_gemm_usable(), "tuning", "DIFFQ_ATTENTION_KERNEL=onednn: bf16 ",
              onednn_bf16_impl(), bf16_dot_gemm_usable() ? "" : "; no AVX512-BF16 for the softmax rows");
        d.attention_kernel = AttentionKernel::onednn;
      } else if (v == "amx") {
        check(attention_amx_usable(), "tuning", "DIFFQ_ATTENTION_KERNEL=amx: this CPU has no AMX-BF16 the kernel ",
              "lets this process use, or no AVX512-BF16 for the softmax rows");
        d.attention_kernel = AttentionKernel::amx;
      } else if (v == "bf16-dot") {
        check(bf16_dot_gemm_usable(), "tuning", "DIFFQ_ATTENTION_KERNEL=bf16-dot: this CPU (or the SIMD target) ",
              "has no AVX512-BF16");
        d.attention_kernel = AttentionKernel::bf16_dot;
      } else if (v == "f32") {
        d.attention_kernel = AttentionKernel::f32;
      } else {
        check(v == "best", "tuning", "DIFFQ_ATTENTION_KERNEL='", v, "' is not one of best, amx, onednn, bf16-dot, f32");
      }
    }
    if (const char* env = std::getenv("DIFFQ_PACK_WEIGHTS"); env && *env) {
      const std::string v = env;
      if (v == "on") {
        check(onednn_bf16_packing_usable(), "tuning", "DIFFQ_PACK_WEIGHTS=on: oneDNN packs no bf16 weights here (bf16 ",
              onednn_bf16_impl(), ")");
        d.weight_packing = WeightPacking::on;
      } else if (v == "off") {
        d.weight_packing = WeightPacking::off;
      } else {
        check(v == "best", "tuning", "DIFFQ_PACK_WEIGHTS='", v, "' is not one of best, on, off");
      }
    }
    if (const char* env = std::getenv("DIFFQ_IMAGE_LAYOUT"); env && *env) {
      const std::string v = env;
      if (v == "channels-first")
        d.image_layout = ImageLayoutChoice::channels_first;
      else if (v == "channels-last")
        d.image_layout = ImageLayoutChoice::channels_last;
      else
        check(v == "best", "tuning", "DIFFQ_IMAGE_LAYOUT='", v, "' is not one of best, channels-first, channels-last");
    }
    // The oneDNN attention tiles (AMX) take larger tiles than the vector ones: each key block is two
    // oneDNN calls whose fixed cost 48 x 256 tiles do not amortise (Wan self attention 465 -> ~720
    // GFLOP/s at 192 x 512 on 2 AMX cores; docs/benchmarks.md "Attention on AMX"). The AMX tiles take the
    // same query tiles (in blocks of 32 rows; their key blocks are their own, attention_amx.cpp).
    if (d.attention_kernel == AttentionKernel::onednn || d.attention_kernel == AttentionKernel::amx ||
        (d.attention_kernel == AttentionKernel::best && attention_onednn_by_default()))
      d.attn_bq = kOnednnAttentionBq, d.attn_bk = kOnednnAttentionBk;
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
